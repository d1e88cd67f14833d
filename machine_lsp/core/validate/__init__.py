"""Chat JSONL validator: a pure function from text to findings with exact positions and mechanical fixes.

Design (why it is fast): every line first goes through a *fast path*, a msgspec typed decode into private structs
that encode most rules as types and constraints (roles, non-empty content, `match` values), followed by a few cheap
Python checks. A line the fast path accepts has no findings and no position is ever computed for it. Anything the
fast path rejects goes to the *slow path*, which decodes generically, locates every key and value in the line with
a small span parser, and reports precise findings. The slow path defines the rules; the fast path is only allowed
to accept lines the slow path finds clean (a test checks this).

Conventions: lines and columns are 1-based; columns count Unicode code points of the line (the LSP layer converts to
utf-16 or utf-8). Lines end at "\n", "\r\n" or a lone "\r" (as editors count them). Blank lines are a warning
(`blank-line`, with a fix that removes them): most JSONL loaders reject them, but they lose no data.
Kind "auto": a row with a non-null `expected` is an eval row, any other row a training row.

Modules: findings (what is reported), inputs (reading bytes), fast (the msgspec fast path), spans (the span
parser), rules (the slow path's row rules), preference (DPO pairs and KTO files), dataset (duplicates, leakage) and passes (whole texts and files). The
public API is re-exported here; callers import from `machine_lsp.core.validate`.
"""

from machine_lsp.core.validate.dataset import dataset_findings
from machine_lsp.core.validate.fast import (
    MATCHES,
    ROLES,
    _fast_check,
    _Function,
    _Message,
    _plain_check,
    _Row,
    _RowOf,
    _Text,
    _Thinking,
    _ToolCall,
)
from machine_lsp.core.validate.file_reports import prompt_keys, validate_bytes, validate_path, validate_text
from machine_lsp.core.validate.findings import (
    Finding,
    Fix,
    Kind,
    LineResult,
    Report,
    Severity,
    TextEdit,
    UnreadableFile,
)
from machine_lsp.core.validate.formats import diagnose_lines
from machine_lsp.core.validate.inputs import BINARY_SNIFF_BYTES, check_binary, read_input
from machine_lsp.core.validate.passes import _BATCH, check_line, check_lines
from machine_lsp.core.validate.preference import PREFERENCE_KINDS, refine_kind
from machine_lsp.core.validate.rules import ROLE_SYNONYMS, _slow_check

__all__ = [
    "BINARY_SNIFF_BYTES",
    "MATCHES",
    "PREFERENCE_KINDS",
    "ROLES",
    "ROLE_SYNONYMS",
    "Finding",
    "Fix",
    "Kind",
    "LineResult",
    "Report",
    "Severity",
    "TextEdit",
    "UnreadableFile",
    "check_binary",
    "check_line",
    "check_lines",
    "dataset_findings",
    "diagnose_lines",
    "prompt_keys",
    "read_input",
    "refine_kind",
    "validate_bytes",
    "validate_path",
    "validate_text",
    # Internals that tests/core/test_validate*.py check against the schema and the slow path.
    "_BATCH",
    "_Function",
    "_Message",
    "_Row",
    "_RowOf",
    "_Text",
    "_Thinking",
    "_ToolCall",
    "_fast_check",
    "_plain_check",
    "_slow_check",
]
