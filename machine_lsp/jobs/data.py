"""Training and eval data for jobs: a reviewed FILE (validated first) or the store's good rows (snapshotted)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from machine_lsp.core import runs
from machine_lsp.core.safe_files import write_file_safely
from machine_lsp.core.schema import (
    RowFileError,
    TagRecord,
    TrainingRow,
    encode_training_row,
    read_training_rows,
)
from machine_lsp.core.trained_in import row_key
from machine_lsp.jobs.runner import JobContext, JobError

if TYPE_CHECKING:
    from machine_lsp.core.store import Store

MAX_LISTED = 5


def resolve(cwd: Path, path: str) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else cwd / p


def validate_or_fail(path: Path, kind: str, ctx: JobContext | None) -> None:
    """Run the core validator; errors stop the job with the first few findings, warnings are logged."""
    from machine_lsp.core import validate

    try:
        report = validate.validate_path(path, kind=kind)  # type: ignore[arg-type]
    except validate.UnreadableFile as exc:
        raise JobError(str(exc)) from None
    errors = [f for f in report.findings if f.severity == "error"]
    warnings = [f for f in report.findings if f.severity == "warning"]
    if errors:
        listed = "; ".join(f"line {f.line}:{f.column} {f.code}: {f.message}" for f in errors[:MAX_LISTED])
        more = f" (and {len(errors) - MAX_LISTED} more)" if len(errors) > MAX_LISTED else ""
        raise JobError(
            f"{path}: {len(errors)} error(s) in the data: {listed}{more}. "
            f"See them all with `machine train validate {path}`"
        )
    if ctx is not None and warnings:
        ctx.log(
            f"{path}: {len(warnings)} warning(s), first: line {warnings[0].line}: {warnings[0].message}",
            "warning",
        )


def read_training_file(path: Path) -> list[tuple[int, TrainingRow]]:
    """(line number, row) for every non-blank line; raises JobError naming the line."""
    try:
        return read_training_rows(path)
    except RowFileError as exc:
        raise JobError(str(exc).replace(": no rows", ": no rows to train on")) from None


def training_data(
    ctx: JobContext, data: str | None
) -> tuple[list[tuple[str, TrainingRow]], runs.DataSnapshot]:
    """Rows labelled by where they came from (``file:line`` or ``store #n``) and the snapshot record."""
    if data:
        path = resolve(ctx.cwd, data)
        if not path.is_file():
            raise JobError(f"{data}: no such file" if not path.exists() else f"{data}: not a file")
        validate_or_fail(path, "train", ctx)
        rows = read_training_file(path)
        snapshot = runs.DataSnapshot(
            role="train",
            source=str(path),
            path=str(path),
            sha256=runs.sha256_file(path),
            rows=len(rows),
            row_keys=[row_key(row.messages) for _, row in rows],
        )
        return [(f"{path.name}:{line}", row) for line, row in rows], snapshot

    from machine_lsp.core.export import export_sft

    store, records = store_records(ctx)
    sft = export_sft(records)
    if not sft:
        raise JobError(
            f"the store ({store.tagged_path}) has no good rows yet: tag turns with `machine good`, "
            "or pass a training FILE"
        )
    return [(f"store row {i}", row) for i, row in enumerate(sft, start=1)], store_snapshot(ctx, sft)


def store_snapshot(ctx: JobContext, rows: list[TrainingRow]) -> runs.DataSnapshot:
    """The store's rows a run trains on, copied into the run directory, with their keys (core.trained_in)."""
    snap = ctx.run_dir / "data" / "train.jsonl"
    payload = b"".join(encode_training_row(r) + b"\n" for r in rows)
    write_file_safely(snap, payload, root=ctx.run_dir)
    return runs.DataSnapshot(
        role="train",
        source="store",
        path=str(snap),
        sha256=runs.sha256_bytes(payload),
        rows=len(rows),
        row_keys=[row_key(row.messages) for row in rows],
    )


def store_records(ctx: JobContext) -> tuple[Store, list[TagRecord]]:
    """The project's store and its records, its read warnings logged (a store that cannot be read fails the job)."""
    from machine_lsp.core.store import Store, StoreError

    try:
        store = Store.open(ctx.cwd)
        records = store.records()
    except StoreError as exc:
        raise JobError(str(exc)) from None
    for warning in store.warnings:
        ctx.log(warning, "warning")
    return store, records


def leave_out_eval_rows(
    ctx: JobContext, labelled: list[tuple[str, TrainingRow]], eval_data: str
) -> tuple[list[tuple[str, TrainingRow]], runs.DataSnapshot | None]:
    """The store's rows without those the eval set holds (core.eval_split), and their new snapshot (None: the
    eval set holds none of them). A missing eval file leaves them all: the eval and the gate say it is missing."""
    from machine_lsp.core import evals
    from machine_lsp.core.eval_split import case_keys, row_eval_key

    path = resolve(ctx.cwd, eval_data)
    if not path.is_file():
        return labelled, None
    try:
        keys = case_keys(evals.load_cases(path))
    except evals.EvalError as exc:
        raise JobError(str(exc)) from None
    kept = [(where, row) for where, row in labelled if row_eval_key(row) not in keys]
    if len(kept) == len(labelled):
        return labelled, None
    if not kept:
        raise JobError(
            f"every good row of the store is in the eval set {path.name}: nothing left to train on"
        )
    ctx.log(
        f"{len(labelled) - len(kept)} tagged rows are in the eval set {path.name}: held out, not trained on"
    )
    return kept, store_snapshot(ctx, [row for _where, row in kept])
