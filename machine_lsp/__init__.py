"""machine-lsp: parametric learning inside the editor."""

__version__ = "0.1.0"
