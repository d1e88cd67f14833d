"""Reading a command's one JSON object argument: each wrong value is a `CommandError` naming the key."""

from __future__ import annotations

from typing import Any

from pygls.uris import to_fs_path

from machine_lsp.lsp.features import CommandError


def require_str(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str) or not value:
        raise CommandError(message=f"missing {key!r} (a string)")
    return value


def optional_str(args: dict[str, Any], key: str) -> str | None:
    value = args.get(key)
    if value is not None and not isinstance(value, str):
        raise CommandError(message=f"{key!r} must be a string")
    return value


def stripped_str(args: dict[str, Any], key: str) -> str | None:
    """`optional_str`, stripped; an empty value is None (the default applies)."""
    value = optional_str(args, key)
    return value.strip() if value else None


def path_arg(args: dict[str, Any], uri_key: str, path_key: str, *, required: bool = False) -> str | None:
    """A file named by URI (`uri_key`, preferred) or by path (`path_key`)."""
    if isinstance(args.get(uri_key), str):
        path = to_fs_path(args[uri_key])
        if path:
            return path
    if isinstance(args.get(path_key), str):
        return args[path_key]
    if required:
        raise CommandError(message=f"missing {uri_key!r} (a file URI) or {path_key!r} (a path)")
    return None


def line_number(args: dict[str, Any]) -> int | None:
    """`line`: a 1-based line number, or None for the whole file."""
    line = args.get("line")
    if line is not None and (not isinstance(line, int) or isinstance(line, bool) or line < 1):
        raise CommandError(message="line must be a 1-based line number")
    return line
