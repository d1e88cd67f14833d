"""`python -m machine_lsp.lsp`: the language server (same as the `machine-lsp` console script)."""

import sys

from machine_lsp.lsp.server import main

sys.exit(main())
