"""Core validation findings as LSP Diagnostics (pure conversion, no server state): a finding's range in the
client's position encoding, its severity and code, and the quick fix's title in `data` for code actions."""

from __future__ import annotations

from lsprotocol import types

from machine_lsp.lsp.positions import core_range, strip_eol, to_client_character

SOURCE = "machine"
SEVERITY = {"error": types.DiagnosticSeverity.Error, "warning": types.DiagnosticSeverity.Warning}


def file_diagnostic(message: str, severity: str = "warning") -> types.Diagnostic:
    return types.Diagnostic(
        range=types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=0)),
        message=message,
        severity=SEVERITY[severity],
        code="file-unchecked",
        source=SOURCE,
    )


def to_diagnostic(codec, lines: list[str], finding, line_offset: int | None) -> types.Diagnostic:
    """A core Finding -> Diagnostic. With line_offset=0 the finding is relative to the single line in `lines`."""
    if line_offset is None:
        rng = core_range(codec, lines, finding.line, finding.column, finding.end_line, finding.end_column)
    else:
        span = max(0, finding.end_line - finding.line)
        start = types.Position(line=0, character=to_client_character(codec, lines[0], finding.column - 1))
        end_col = finding.end_column - 1 if span == 0 else len(strip_eol(lines[0]))
        end = types.Position(line=0, character=to_client_character(codec, lines[0], end_col))
        rng = types.Range(start=start, end=end)
    data = {"fix": finding.fix.title} if getattr(finding, "fix", None) is not None else None
    return types.Diagnostic(
        range=rng,
        message=finding.message,
        severity=SEVERITY.get(finding.severity, types.DiagnosticSeverity.Warning),
        code=finding.code,
        source=SOURCE,
        data=data,
    )


def shift_to_line(diagnostic: types.Diagnostic, line0: int) -> types.Diagnostic:
    """A diagnostic checked as a lone line (line 0), moved to the line it is on."""
    rng = diagnostic.range
    return types.Diagnostic(
        range=types.Range(
            start=types.Position(line=line0, character=rng.start.character),
            end=types.Position(line=line0, character=rng.end.character),
        ),
        message=diagnostic.message,
        severity=diagnostic.severity,
        code=diagnostic.code,
        source=diagnostic.source,
        data=diagnostic.data,
    )
