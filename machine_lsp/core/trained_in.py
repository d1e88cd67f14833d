"""Which runs trained on a tagged row: the "trained in" column of the tagged-rows view (`machine.tagged`).

A training run records, in each `train` data snapshot of its manifest, one key per row it trained on
(`DataSnapshot.row_keys`): the row's conversation in training order, hashed. A good record trains as exactly that
row (export_sft: chat order, a rewrite already applied), so a record was trained in a run when its key is among the
run's keys, whether the run read the store or a file exported from it. Runs from before the keys were recorded are
matched by reading their snapshot copy, when it is still the file the manifest's checksum names. Preference runs
(DPO/KTO rows) carry no keys: their rows are pairs, not a tagged row's conversation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from machine_lsp.core import runs
from machine_lsp.core.export import chat_order
from machine_lsp.core.schema import Message, RowFileError, TagRecord, encode, read_training_rows

# A smoke run trains two steps and keeps no checkpoint: nothing it trained stays, so it is not "trained in".
TRAINING_JOBS = ("train-run", "retrain")
KEY_CHARS = (
    16  # 64 bits of sha256: no two rows of one project collide in practice, and a manifest stays small
)


def row_key(messages: Iterable[Message]) -> str:
    """The key of a training row: its messages in chat order (as export_sft writes them), hashed."""
    return hashlib.sha256(encode(chat_order(messages))).hexdigest()[:KEY_CHARS]


def snapshot_keys(snapshot: runs.DataSnapshot, run_dir: Path) -> set[str]:
    """The row keys of one train snapshot: recorded, or read back from its copy in the run directory."""
    if snapshot.row_keys:
        return set(snapshot.row_keys)
    path = Path(snapshot.path)
    # Only a copy the run owns, unchanged since (a file outside the run dir may have been edited since).
    if not path.is_relative_to(run_dir) or not path.is_file() or runs.sha256_file(path) != snapshot.sha256:
        return set()
    try:
        return {row_key(row.messages) for _, row in read_training_rows(path)}
    except (RowFileError, OSError):
        return set()  # a preference snapshot (pairs, KTO rows): not chat rows


def trained_in(runs_dir: Path, records: Iterable[TagRecord]) -> dict[str, list[str]]:
    """Record id -> the ids of the finished training runs whose data held its row (oldest first); good records
    only (only they become training rows), and only those some run trained on."""
    keys = {record.id: row_key(record.messages) for record in records if record.verdict == "good"}
    found: dict[str, list[str]] = {}
    finished = [
        (run_dir, manifest)
        for run_dir, manifest in runs.list_runs(runs_dir)
        if manifest is not None and manifest.status == "done" and manifest.job in TRAINING_JOBS
    ]
    for run_dir, manifest in sorted(finished, key=lambda run: (run[1].created_at, run[1].id)):
        trained = set().union(*(snapshot_keys(s, run_dir) for s in manifest.data if s.role == "train"))
        for record_id, key in keys.items():
            if key in trained:
                found.setdefault(record_id, []).append(manifest.id)
    return found
