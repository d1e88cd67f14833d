"""Scaffolds written into a project: `machine.toml` (the run configuration), `train_sft.py`, `eval.py`."""
