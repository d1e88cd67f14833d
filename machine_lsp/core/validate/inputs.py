"""Reading input: file bytes with readable errors, binary sniffing, invalid UTF-8 as findings."""

from __future__ import annotations

import re
from pathlib import Path

from machine_lsp.core.validate.findings import Finding, UnreadableFile

MAX_UTF8_FINDINGS = 1_000


BINARY_SNIFF_BYTES = 8192


_SURROGATES = re.compile("[\udc80-\udcff]+")


def _decode_line(raw: bytes, line_no: int) -> tuple[str, list[Finding]]:
    """Text of one line; each run of invalid UTF-8 bytes becomes U+FFFD (one per byte, so columns stay put) and
    a finding at its exact position."""
    try:
        return raw.decode("utf-8"), []
    except UnicodeDecodeError:
        pass
    text = raw.decode("utf-8", "surrogateescape")
    findings: list[Finding] = []
    for found in _SURROGATES.finditer(text):
        if len(findings) >= MAX_UTF8_FINDINGS:
            break
        shown = found.group().encode("utf-8", "surrogateescape").hex(" ")
        findings.append(
            Finding(
                line_no,
                found.start() + 1,
                line_no,
                found.end() + 1,
                "error",
                "invalid-utf8",
                f"bytes {shown} are not valid UTF-8 (save the file as UTF-8)",
            )
        )
    return _SURROGATES.sub(lambda m: "\ufffd" * len(m.group()), text), findings


def check_binary(data: bytes, name: str) -> None:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise UnreadableFile(f"{name}: is UTF-16 text; save it as UTF-8 (JSONL is UTF-8)")
    nul = data.find(b"\x00", 0, BINARY_SNIFF_BYTES)
    if nul >= 0:
        raise UnreadableFile(f"{name}: looks like a binary file (NUL byte at offset {nul}), not UTF-8 JSONL")


def read_input(path: str | Path) -> bytes:
    """The bytes of a file to validate, or UnreadableFile with a message a person understands."""
    from machine_lsp.core import safe_files

    p = Path(path)
    data = safe_files.read_input(p, UnreadableFile, "a JSONL file")
    check_binary(data, str(p))
    return data
