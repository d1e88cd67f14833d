"""Child-process jobs that stream JSON-lines events on stdout."""
