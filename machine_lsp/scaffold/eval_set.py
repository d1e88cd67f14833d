"""`machine train eval split` / `machine.eval.split` / *Make Eval Set…*: the eval file, made from the store.

Holds out tagged good rows (core.eval_split) and writes them to the eval file machine.toml names (`[eval] data`),
or to `out`, or to `eval.jsonl`; when machine.toml names no eval file, it gets `[eval] data` pointing at the one
written (a new machine.toml when there is none), so Baseline Eval and the gate find it. Runs that train on the store
then leave these rows out (jobs/data.py leave_out_eval_rows). An existing eval file is replaced only with `force`.
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from machine_lsp.core.eval_split import encode_eval_rows, split_store
from machine_lsp.core.safe_files import NotRegularFile, write_file_safely
from machine_lsp.core.store import Store
from machine_lsp.scaffold.config import (
    CONFIG_FILE,
    ConfigError,
    MachineConfig,
    load_project_config,
    render_toml,
)

DEFAULT_EVAL_FILE = "eval.jsonl"
_EVAL_HEADER = re.compile(r"^\[eval\][ \t]*(#.*)?$", re.MULTILINE)


class EvalSetError(ValueError):
    """Why no eval set was written (one line)."""


class EvalSetReport(msgspec.Struct):
    path: str  # the eval file written (absolute)
    rows: int  # held out into it
    training: int  # good rows left to train on
    by: str  # "session" or "row"
    sessions: int  # sessions held out whole (by == "session")
    config: str | None  # machine.toml when it was written or given `[eval] data`
    message: str


def make_eval_set(project: Path, out: str | None = None, *, force: bool = False) -> EvalSetReport:
    try:
        config, config_path = load_project_config(project)
    except ConfigError as exc:
        raise EvalSetError(str(exc)) from None
    rel = out or config.eval.data or DEFAULT_EVAL_FILE
    path = Path(rel) if Path(rel).is_absolute() else project / rel
    if (path.exists() or path.is_symlink()) and not force:
        raise EvalSetError(f"{rel} already exists; --force (force: true) replaces it with a new split")
    split = split_store(
        Store.open(project).records(), min_rows=config.gate.min_eval_rows, fraction=config.gate.eval_fraction
    )
    if isinstance(split, str):
        raise EvalSetError(f"no eval set made: {split}")
    try:
        write_file_safely(path, encode_eval_rows(split.held_out), root=project)
    except (NotRegularFile, OSError) as exc:
        raise EvalSetError(f"cannot write {rel}: {exc}") from None
    written_config = None if config.eval.data == rel else _name_eval_file(project, config_path, config, rel)
    how = f"{split.sessions_held_out} sessions held out whole" if split.by == "session" else "held out by row"
    message = (
        f"wrote {len(split.held_out)} held-out rows to {rel} ({how}); {split.training} good rows left to train on"
        + (f"; {CONFIG_FILE}: [eval] data = {rel!r}" if written_config else "")
    )
    return EvalSetReport(
        path=str(path),
        rows=len(split.held_out),
        training=split.training,
        by=split.by,
        sessions=split.sessions_held_out,
        config=written_config,
        message=message,
    )


def _name_eval_file(project: Path, config_path: Path | None, config: MachineConfig, rel: str) -> str | None:
    """machine.toml's `[eval] data` set to `rel` (the rest of the file kept as it is); None when `out` was given
    while machine.toml names another eval file (that setting is the user's)."""
    if config.eval.data:
        return None
    if config_path is None:
        path = project / CONFIG_FILE
        config.eval.data = rel
        text = render_toml(config)
    else:
        path = config_path
        old = path.read_text(encoding="utf-8")
        line = f"data = {_toml_string(rel)}\n"
        match = _EVAL_HEADER.search(old)
        if match:
            text = old[: match.end()] + "\n" + line + old[match.end() + 1 :]
        else:
            text = old + ("" if old.endswith("\n") or not old else "\n") + f"\n[eval]\n{line}"
    write_file_safely(path, text.encode("utf-8"), root=path.parent)
    return str(path)


def _toml_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
