"""The machine-lsp language server (pygls). Never imports torch, transformers or tinker."""
