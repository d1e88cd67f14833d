"""docs/ARCHITECTURE.md names every module under machine_lsp/: a module nobody describes is a module nobody can
find. A module counts as named by its path below machine_lsp/ (`core/store.py`), its dotted name, or its file name
(or its stem) inside the section of its package (`## core (machine_lsp/core/)` ... `store.py`); a package's `__init__.py` by its
folder (`transcripts/`)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "machine_lsp"
DOC = REPO / "docs" / "ARCHITECTURE.md"


def _sections(doc: str) -> dict[str, str]:
    """The text of each `## ` section, keyed by the top-level package its heading names (`core`, `lsp`, ...)."""
    sections: dict[str, str] = {}
    for chunk in re.split(r"^(?=## )", doc, flags=re.M):
        named = re.findall(r"machine_lsp/(\w+)/", chunk.splitlines()[0] if chunk else "")
        for package in named:
            sections[package] = sections.get(package, "") + chunk
        if chunk.startswith("## faces"):  # the faces section describes cli/ and lsp/
            for package in ("cli", "lsp"):
                sections[package] = sections.get(package, "") + chunk
    return sections


def _named(module: Path, doc: str, sections: dict[str, str]) -> bool:
    rel = module.relative_to(PACKAGE)
    top = rel.parts[0] if len(rel.parts) > 1 else ""
    section = sections.get(top, "")
    if module.name == "__init__.py":
        folder = "/".join(rel.parts[:-1]) + "/"
        return folder in doc or f"machine_lsp/{folder}" in doc or rel.parts[-2] + "/" in section
    dotted = "machine_lsp." + ".".join(rel.with_suffix("").parts)
    inner = "/".join(rel.parts[1:])  # transcripts/pi.py inside core's section
    return any(name in doc for name in (str(rel), dotted)) or any(
        re.search(rf"(?<![\w/]){re.escape(name)}(?![\w])", section)
        for name in {module.name, inner, module.stem}
    )


def test_every_module_is_named_in_architecture() -> None:
    doc = DOC.read_text(encoding="utf-8")
    sections = _sections(doc)
    modules = sorted(p for p in PACKAGE.rglob("*.py") if "templates" not in p.parts)
    missing = [str(p.relative_to(REPO)) for p in modules if not _named(p, doc, sections)]
    assert not missing, "modules docs/ARCHITECTURE.md does not name:\n" + "\n".join(missing)
