"""Training/sampling engines (local SmolLM2 via torch+peft, Tinker). Heavy imports stay lazy."""
