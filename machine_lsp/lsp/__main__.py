"""`python -m machine_lsp.lsp`: the language server (same as the `machine-lsp` console script)."""

import sys

from machine_lsp.lsp.server import main

# The guard matters: the turns worker process (spawn) imports this module as `__mp_main__`.
if __name__ == "__main__":
    sys.exit(main())
