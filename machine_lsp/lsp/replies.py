"""The replies of every `machine.*` command, as msgspec structs: the contract between the server and its clients.

The VS Code extension's TypeScript types are generated from these structs' JSON schema:

    python -m machine_lsp.lsp.replies --schema editors/vscode/src/generated/replies.schema.json

(`make -C editors/vscode generate` runs this and `json-schema-to-typescript`; the extension's unit tests fail when
the checked-in files drift from what these structs produce.) Field names are the wire names: change one here and
the extension's build tells you every place that reads it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Literal

import msgspec
import msgspec.inspect
from msgspec import UNSET, UnsetType

from machine_lsp.core.evals import Comparison
from machine_lsp.core.schema import Source, TagRecord, Verdict
from machine_lsp.core.store import StoreCounts

JobStatus = Literal["starting", "running", "done", "failed", "cancelled"]


class TagReply(msgspec.Struct):
    """`machine.tag`: the record written (or the one it duplicates)."""

    id: str
    verdict: Verdict
    duplicate_of: str | None
    message: str
    store: str  # the store's tagged.jsonl
    # Standing records on the same turn this tag contradicts: they no longer train (the last tag wins).
    overrides: list[str] = msgspec.field(default_factory=list)


class TagEditReply(msgspec.Struct):
    """`machine.untag` / `machine.retag`: the record appended, which supersedes `supersedes` (history is kept)."""

    id: str
    supersedes: str
    untag: bool  # true: the tag was taken back; false: replaced by this record
    verdict: Verdict  # what the new record says (for an untag: the verdict taken back)
    note: str
    overrides: list[str]  # standing records on the same turn the new record contradicts (it wins)
    message: str
    store: str


class TaggedRecord(msgspec.Struct):
    id: str
    verdict: Verdict
    note: str
    source: Source
    answer: str  # the assistant's answer, first 200 characters
    rewritten: bool
    trace: bool
    created_at: str
    # The user message the answer follows, first 200 characters (two "answer: 62" rows differ here).
    prompt: str = ""
    # The finished training runs whose data held this row (core.trained_in), oldest first; empty: not trained yet.
    trained_in: list[str] = msgspec.field(default_factory=list)


class TaggedReply(msgspec.Struct):
    """`machine.tagged`: the store's records (optionally of one verdict)."""

    store: str
    records: list[TaggedRecord]
    warnings: list[str]


class DataReply(msgspec.Struct):
    """`machine.data`: where the store is and what it holds."""

    store: str
    counts: StoreCounts
    warnings: list[str]


class JobSummary(msgspec.Struct):
    """A job the server ran or runs: the reply of `machine.validate`, `machine.train.smoke|run` and
    `machine.eval.baseline|checkpoint|probe` (and the `data` of their error when the job failed)."""

    job_id: str
    verb: str
    status: JobStatus
    message: str
    run_id: str | None
    run_dir: str | None
    result: dict[str, Any] | None  # the job's `done` event result
    pid: int | None
    started: float  # seconds since the epoch
    ended: float | None
    last_event: dict[str, Any] | None  # the last machine/jobEvent payload


class JobPlan(msgspec.Struct, kw_only=True):
    """`plan: true` on a job command: the run it would start, resolved as the job resolves it; nothing runs.
    `problem` says why the job is sure to fail (then it is refused without asking)."""

    status: Literal["plan"] = "plan"
    verb: str
    engine: str
    model: str
    checkpoint: str | None = None
    data: str | None = None  # a file name, "the store's good rows" or "the bleed probe"
    rows: int | None = None
    steps: int | None = None
    tokens: int | None = None  # an estimate from characters
    problem: str | None = None
    costs_money: bool = False  # on hosted Tinker (a server on this machine is free)
    message: str = ""


class JobDeclined(msgspec.Struct):
    """A paid or long job the user declined when asked: nothing ran."""

    status: Literal["declined"]
    message: str


class EvalSetReply(msgspec.Struct):
    """`machine.eval.split`: the eval set made from the store (scaffold/eval_set.py)."""

    path: str  # the eval file written (absolute)
    rows: int  # tagged rows held out into it
    training: int  # good rows left to train on (store runs leave the eval rows out)
    by: str  # "session" (whole sessions held out) or "row"
    sessions: int
    config: str | None  # machine.toml, when it was written or given `[eval] data`
    message: str


class WroteReply(msgspec.Struct):
    """`machine.train.sft` and `machine.eval.init`: the files written (absolute paths)."""

    written: list[str]
    message: str


class CompareReply(msgspec.Struct):
    """`machine.eval.compare`: B against A."""

    message: str
    comparison: Comparison


class RunEntry(msgspec.Struct, omit_defaults=True):
    """A run directory on disk; job, status and created_at are absent when it has no manifest."""

    run_dir: str
    id: str
    job: str | UnsetType = UNSET
    status: str | UnsetType = UNSET
    created_at: str | UnsetType = UNSET


class JobsListReply(msgspec.Struct):
    """`machine.jobs.list`: this server's jobs and the newest run directories."""

    jobs: list[JobSummary]
    runs: list[RunEntry]


class CancelReply(JobSummary):
    """`machine.jobs.cancel`: whether a cancel was sent, and the job as it stands after it."""

    cancelled: bool


class ServerSettingsInfo(msgspec.Struct):
    trainGlobs: list[str]  # noqa: N815 - wire names
    evalGlobs: list[str]  # noqa: N815
    debounceMs: int  # noqa: N815


class DocumentTiming(msgspec.Struct):
    last_check_ms: float
    last_checked_lines: int


class InfoReply(msgspec.Struct):
    """`machine.server.info`: what the server runs on and how it is set up."""

    version: str
    pid: int
    python: str
    heavy_modules: list[str]  # torch & co. loaded in the server process: should always be empty
    diagnostics: Literal["pull", "push"]
    position_encoding: str
    client_progress: bool
    settings: ServerSettingsInfo
    open_requests: int  # request futures pygls holds (bounded: the notification-future leak is fixed)
    line_cache_chars: int  # characters held by the per-line validation cache (bounded by size)
    timing: dict[str, DocumentTiming]


# -- agent sessions (machine.sessions, machine.sessions.turns, machine.tag {from, preview}) ---------------------
class SessionEntry(msgspec.Struct):
    """One agent session run in this project (core/sessions.py)."""

    harness: str  # pi | claude-code | codex | opencode | letta-code | qwen-code | gemini-cli | proxy
    id: str
    path: str  # the log (for OpenCode: its database)
    cwd: str  # the directory the agent ran in
    updated: float  # seconds since the epoch
    turns: int | None  # None: not counted (beyond `limit`) or unreadable (see problem)
    first_prompt: str
    problem: str | None  # why the log could not be read


class SessionsReply(msgspec.Struct):
    """`machine.sessions`: this project's agent sessions, newest first."""

    project: str
    sessions: list[SessionEntry]


class SessionTurn(msgspec.Struct):
    """One assistant turn of a session, and what the store already says about it."""

    number: int  # 1-based: `from: "SESSION-ID:NUMBER"` tags it
    line: int  # 1-based span of the log that holds the turn
    end_line: int
    uri: str  # the log the turn came from
    prompt: str  # the user prompt that led to it, flattened and cut to 200 characters
    answer: str  # the answer, flattened and cut to 200 characters
    blocked: str | None  # why it cannot be tagged good (an aborted or empty reply)
    verdict: Verdict | None  # the standing tag on this turn (the last one wins); None: not tagged
    rewritten: bool  # the standing tag is a rewrite
    records: list[str]  # ids of every store record on this turn
    conflict: bool  # the records on this turn contradict each other
    pairs: int = 0  # preference pairs the standing tags make on this turn's prompt (dpo, sft+dpo train them)


class SessionTurnsReply(msgspec.Struct):
    """`machine.sessions.turns`: one session's turns, in order."""

    harness: str
    id: str
    path: str
    turns: list[SessionTurn]
    problems: list[str]  # lines of the log that could not be read


class TagPreview(msgspec.Struct):
    """`machine.tag` with `preview: true`: the record it would store (nothing is stored)."""

    preview: Literal[True]
    verdict: Verdict
    harness: str | None
    session_id: str | None
    where: str  # path:line of the answer
    prompt: str  # the last user prompt, whole
    answer: str  # the answer, whole (the rewrite when there is one)
    duplicate_of: str | None  # the record already holding this conversation with this verdict
    record: TagRecord


class ServeReply(msgspec.Struct, kw_only=True):
    """`machine.serve.start|stop|status`: the checkpoint server the language server runs (one per server).
    `url` is the server's root (Anthropic base); `openai_base` is `url` + `/v1`; agents use the model `model`."""

    status: Literal["starting", "serving", "stopped"]
    message: str
    checkpoint: str | None = None
    url: str | None = None
    openai_base: str | None = None
    model: str | None = None
    port: int | None = None
    job_id: str | None = None
    pid: int | None = None
    served_dir: str | None = None  # where every answered exchange is appended (chat JSONL)
    already_running: bool = False  # a start that found this server running (nothing new was started)
    # `promoted`/`latest` follow the store: `checkpoint` is the one answering now; `swaps` counts the checkpoints
    # swapped in since the server started, `last_swap` is the last swap's line ("swapped: now serving X (was Y; …)"
    # or "swap failed: …; still serving Y"). Each swap also comes as a `machine/jobEvent` `ready` (name: the new one).
    swaps: int = 0
    last_swap: str | None = None


class UseReply(msgspec.Struct, kw_only=True):
    """`machine.use`: the configuration that points `agent` at the checkpoint (`machine use`); `written` is empty
    unless `write: true` was passed."""

    agent: str
    checkpoint: str
    path: str  # the file the agent reads
    text: str  # the entry, as `machine use` prints it
    notes: list[str]
    warnings: list[str]
    written: list[str]
    local: bool  # reached through machine.serve (else Tinker's own endpoints)
    port: int | None
    serving: bool  # a local checkpoint server runs (machine.serve.start)
    message: str


class TinkerServerReply(msgspec.Struct, kw_only=True):
    """`machine.tinker.serve|status|stop`: the project's local Tinker server (SkyRL tx)."""

    status: Literal["starting", "running", "stopped"]
    message: str
    base_url: str | None = None
    pid: int | None = None
    model: str | None = None
    log: str | None = None
    started_at: str | None = None
    answering: bool | None = None  # its health check answered (status); None: not asked
    config: str | None = None  # the machine.toml that now holds `[tinker] base_url` (serve)
    job_id: str | None = None  # the start job (serve)
    already_running: bool = False
    stale_record_removed: bool = False


JobReply = JobSummary | JobDeclined

#: command id -> the struct(s) its reply can be.
COMMAND_REPLIES: dict[str, tuple[type[msgspec.Struct], ...]] = {
    "machine.tag": (TagReply, TagPreview),
    "machine.untag": (TagEditReply,),
    "machine.retag": (TagEditReply,),
    "machine.sessions": (SessionsReply,),
    "machine.sessions.turns": (SessionTurnsReply,),
    "machine.tagged": (TaggedReply,),
    "machine.data": (DataReply,),
    "machine.validate": (JobSummary,),
    "machine.train.sft": (WroteReply,),
    "machine.eval.init": (WroteReply,),
    "machine.eval.compare": (CompareReply,),
    "machine.eval.split": (EvalSetReply,),
    "machine.jobs.list": (JobsListReply,),
    "machine.jobs.cancel": (CancelReply,),
    "machine.server.info": (InfoReply,),
    "machine.train.smoke": (JobSummary, JobDeclined, JobPlan),
    "machine.train.run": (JobSummary, JobDeclined, JobPlan),
    "machine.retrain": (JobSummary, JobDeclined, JobPlan),
    "machine.train.preferences": (JobSummary, JobDeclined, JobPlan),
    "machine.eval.baseline": (JobSummary, JobDeclined, JobPlan),
    "machine.eval.checkpoint": (JobSummary, JobDeclined, JobPlan),
    "machine.eval.probe": (JobSummary, JobDeclined, JobPlan),
    "machine.serve.start": (ServeReply,),
    "machine.serve.stop": (ServeReply,),
    "machine.serve.status": (ServeReply,),
    "machine.use": (UseReply,),
    "machine.tinker.serve": (TinkerServerReply,),
    "machine.tinker.status": (TinkerServerReply,),
    "machine.tinker.stop": (TinkerServerReply,),
}


def to_wire(reply: Any) -> Any:
    """What goes into the JSON-RPC result: plain builtins (pygls cannot serialise msgspec structs itself)."""
    return msgspec.to_builtins(reply) if isinstance(reply, msgspec.Struct) else reply


def schema() -> dict[str, Any]:
    """One JSON schema: an object `MachineCommandReplies` whose properties map each command id to its reply."""
    structs = sorted({t for types in COMMAND_REPLIES.values() for t in types}, key=lambda t: t.__name__)
    (_, *_), components = msgspec.json.schema_components(structs, ref_template="#/$defs/{name}")
    properties: dict[str, Any] = {}
    for command, types in sorted(COMMAND_REPLIES.items()):
        refs = [{"$ref": f"#/$defs/{t.__name__}"} for t in types]
        properties[command] = refs[0] if len(refs) == 1 else {"anyOf": refs}
    for name, struct in _reachable_structs(structs).items():
        component = components[name]
        # Closed objects; a struct that does not omit defaults always sends every field, so all are required.
        component["additionalProperties"] = False
        if not struct.__struct_config__.omit_defaults:
            component["required"] = list(component.get("properties", {}))
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "MachineCommandReplies",
        "description": "The reply of each machine.* workspace/executeCommand (generated from machine_lsp/lsp/replies.py).",
        "type": "object",
        "properties": properties,
        "required": sorted(properties),
        "additionalProperties": False,
        "$defs": dict(sorted(components.items())),
    }


def _reachable_structs(roots: list[type[msgspec.Struct]]) -> dict[str, type[msgspec.Struct]]:
    found: dict[str, type[msgspec.Struct]] = {}

    def walk(info: msgspec.inspect.Type) -> None:
        if isinstance(info, msgspec.inspect.StructType):
            if info.cls.__name__ in found:
                return
            found[info.cls.__name__] = info.cls
            for field in info.fields:
                walk(field.type)
        elif isinstance(info, msgspec.inspect.UnionType):
            for member in info.types:
                walk(member)
        elif isinstance(info, msgspec.inspect.ListType | msgspec.inspect.DictType):
            walk(info.item_type if isinstance(info, msgspec.inspect.ListType) else info.value_type)

    for info in msgspec.inspect.multi_type_info(roots):
        walk(info)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m machine_lsp.lsp.replies",
        description="Write the JSON schema of the machine.* replies.",
    )
    parser.add_argument(
        "--schema", metavar="PATH", help="write the schema here ('-' for stdout)", default="-"
    )
    args = parser.parse_args(argv)
    text = json.dumps(schema(), indent=2, ensure_ascii=False) + "\n"
    if args.schema == "-":
        sys.stdout.write(text)
    else:
        from machine_lsp.core.safe_files import write_output

        Path(args.schema).parent.mkdir(parents=True, exist_ok=True)
        write_output(args.schema, text.encode("utf-8"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
