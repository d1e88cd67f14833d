"""The `machine` command line: translates argv into core and engine calls."""
