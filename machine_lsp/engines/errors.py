"""`EngineError`, in a module of its own so light modules (the objectives registry, which machine.toml's config
reads) can raise it without importing `engines.base` and its typing-only tinker import."""


class EngineError(Exception):
    """A precise, user-facing engine failure (bad setting, missing model or tokenizer, bad checkpoint)."""
