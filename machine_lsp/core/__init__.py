"""Domain core: schemas, store, transcripts, tagging, export, validation, evals. Never imports torch or pygls."""
