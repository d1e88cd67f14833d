"""Where the other verbs find the managed server: `machine.toml` `[tinker] base_url`.

The file is edited in place (one line in the `[tinker]` section, added if missing), so the user's comments and
other settings stay as they are; the result is parsed again before it replaces the file (by the safe-write rule: no link followed).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import msgspec

from machine_lsp.core.safe_files import write_file_safely
from machine_lsp.scaffold.config import CONFIG_FILE, configured_base_url  # noqa: F401 (re-exported)

_SECTION = re.compile(r"^\s*\[([^\[\]]+)\]\s*(#.*)?$")
_BASE_URL = re.compile(r"^\s*base_url\s*=")
COMMENT = "  # written by `machine tinker serve`; TINKER_BASE_URL overrides it"


def set_base_url(project_dir: Path, url: str) -> Path:
    """Write `[tinker] base_url = '<url>'` into the project's machine.toml (created if missing)."""
    from machine_lsp.scaffold.config import ConfigError, MachineConfig

    path = project_dir / CONFIG_FILE
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        lines = []
    entry = f"base_url = '{url}'{COMMENT}"
    section: str | None = None
    header_at: int | None = None
    for index, line in enumerate(lines):
        match = _SECTION.match(line)
        if match:
            section = match.group(1).strip()
            if section == "tinker":
                header_at = index
            continue
        if section == "tinker" and _BASE_URL.match(line):
            lines[index] = entry
            break
    else:
        if header_at is None:
            lines += (["", "[tinker]"] if lines else ["[tinker]"]) + [entry]
        else:
            lines.insert(header_at + 1, entry)
    text = "\n".join(lines) + "\n"
    try:
        msgspec.convert(tomllib.loads(text), MachineConfig)
    except (tomllib.TOMLDecodeError, msgspec.ValidationError) as exc:
        raise ConfigError(f"{path}: not updated, the result would not be valid ({exc})") from None
    try:
        write_file_safely(path, text.encode("utf-8"), root=project_dir)
    except OSError as exc:
        raise ConfigError(f"{path}: not updated: {exc}") from None
    return path
