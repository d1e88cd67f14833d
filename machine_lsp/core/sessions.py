"""Find the agent sessions of a project, newest first, and resolve `--from last` / `--from SESSION-ID[:TURN]`.

Each harness records the directory it ran in; a session belongs to the project when that directory is the project
directory or inside it. Where each harness keeps its sessions (homes come from the environment, so tests and
unusual setups can move them):

| harness | where | the directory it ran in |
|---|---|---|
| Pi | `$PI_CODING_AGENT_DIR` or `~/.pi/agent`, `sessions/--<cwd>--/*.jsonl` | header `cwd` |
| Claude Code | `$CLAUDE_CONFIG_DIR` or `~/.claude`, `projects/<cwd slug>/*.jsonl` | each line's `cwd` |
| Codex | `$CODEX_HOME` or `~/.codex`, `sessions/YYYY/MM/DD/rollout-*.jsonl` | `session_meta.payload.cwd` |
| OpenCode | `$XDG_DATA_HOME` or `~/.local/share`, `opencode/opencode.db` | `session.directory` |
| Letta Code | `$LETTA_LOCAL_BACKEND_DIR` or `~/.letta/lc-local-backend`, `conversations/<id>/messages.jsonl` | header `cwd` |
| Qwen Code | `~/.qwen`, `projects/<cwd with / -> ->/chats/<sessionId>.jsonl` | each line's `cwd` |
| Gemini CLI | `$GEMINI_CLI_HOME` or `~`, `.gemini/tmp/<project>/chats/session-*.json[l]` | `tmp/<project>/.project_root`, else the header's `projectHash` (sha256 of the path) |
| proxy (`machine capture proxy`) | the project's store, `.machine/captured/*.jsonl` | the project itself |

Only a log's first lines are read to place it; turns are counted (the whole log read) for the newest sessions only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from machine_lsp.core.schema import text_of
from machine_lsp.core.transcripts import TranscriptError, Turn, load_turns, turn_at
from machine_lsp.core.transcripts.opencode import db_sessions, load_db_turns

HARNESSES = ("pi", "claude-code", "codex", "opencode", "letta-code", "qwen-code", "gemini-cli", "proxy")
SHORT_ID = 8  # the least an id is shortened to (as git abbreviates hashes); longer where sessions share more
_HEAD_BYTES = 256 * 1024  # enough for the first lines of any log (Claude Code's first lines can be long)


@dataclass
class Session:
    harness: str
    id: str
    path: Path  # the log (for OpenCode: the database)
    cwd: str
    updated: float  # seconds since the epoch
    turns: int | None = None  # None: not counted (or the log could not be read)
    first_prompt: str = ""
    problem: str | None = None  # why the log could not be read

    def load(self, *, trace: bool = False, thinking: bool = False) -> list[Turn]:
        if self.harness == "opencode":
            return load_db_turns(self.path, self.id, trace=trace, thinking=thinking)
        return load_turns(self.path, trace=trace, thinking=thinking)


@dataclass
class Homes:
    """Where each harness keeps its sessions, from the environment (HOME and the harness's own variables)."""

    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    notes: list[str] = field(default_factory=list)  # one line per source that could not be read

    def _home(self) -> Path:
        return Path(self.env.get("HOME") or Path.home())

    def _dir(self, variable: str, default: Path) -> Path:
        value = self.env.get(variable)
        return Path(value).expanduser() if value else default

    @property
    def pi(self) -> Path:
        return self._dir("PI_CODING_AGENT_DIR", self._home() / ".pi" / "agent") / "sessions"

    @property
    def claude(self) -> Path:
        return self._dir("CLAUDE_CONFIG_DIR", self._home() / ".claude") / "projects"

    @property
    def codex(self) -> Path:
        return self._dir("CODEX_HOME", self._home() / ".codex") / "sessions"

    @property
    def opencode(self) -> Path:
        return self._dir("XDG_DATA_HOME", self._home() / ".local" / "share") / "opencode" / "opencode.db"

    @property
    def qwen(self) -> Path:
        return self._home() / ".qwen" / "projects"

    @property
    def gemini(self) -> Path:
        return self._dir("GEMINI_CLI_HOME", self._home()) / ".gemini" / "tmp"

    @property
    def letta(self) -> Path:
        return (
            self._dir("LETTA_LOCAL_BACKEND_DIR", self._home() / ".letta" / "lc-local-backend")
            / "conversations"
        )


def find_sessions(
    project_dir: Path,
    *,
    harness: str | None = None,
    homes: Homes | None = None,
    count_turns: int = 20,
) -> list[Session]:
    """The sessions run in the project holding `project_dir` (its root or below), newest first; the newest
    `count_turns` get turn counts."""
    homes = homes or Homes()
    project = _real(project_root(project_dir))
    found: list[Session] = []
    finders = {
        "pi": _pi_sessions,
        "claude-code": _claude_sessions,
        "codex": _codex_sessions,
        "opencode": _opencode_sessions,
        "letta-code": _letta_sessions,
        "qwen-code": _qwen_sessions,
    }
    for name, finder in finders.items():
        if harness is not None and name != harness:
            continue
        found.extend(session for session in finder(homes) if _inside(session.cwd, project))
    if harness in (None, "gemini-cli"):
        found.extend(session for session in _gemini_sessions(homes, project) if _inside(session.cwd, project))
    if harness in (None, "proxy"):
        found.extend(_captured_sessions(project))
    found.sort(key=lambda session: (session.updated, session.id), reverse=True)
    for session in found[:count_turns]:
        _count(session)
    return found


def resolve_from(
    spec: str, project_dir: Path, *, trace: bool = False, thinking: bool = False, homes: Homes | None = None
) -> Turn | None:
    """The turn `--from` names when it names a session: `last` (the newest session's last turn) or
    `SESSION-ID[:TURN]` (a unique prefix of a session id; TURN counts from 1, default the last). None when `spec`
    is a file (FILE[:LINE]): the caller reads it. Raises TranscriptError when no session matches."""
    if _names_a_file(spec, project_dir):
        return None
    if spec == "last":
        sessions = find_sessions(project_dir, homes=homes, count_turns=0)
        for session in sessions:
            turns = _try_load(session, trace=trace, thinking=thinking)
            if turns:
                return turn_at(turns, None)
        raise TranscriptError(
            "--from last",
            f"no agent session with a turn found for {project_dir} "
            f"(looked for {', '.join(HARNESSES)} sessions run in this directory; `machine sessions` lists them)",
        )
    session_part, sep, turn_part = spec.rpartition(":")
    if not (sep and turn_part.isdigit() and session_part):
        session_part, turn_part = spec, ""
    session = _session_by_id(session_part, project_dir, homes)
    if session is None:
        return None if _looks_like_a_path(spec) else _no_session(spec, project_dir)
    turns = session.load(trace=trace, thinking=thinking)
    if not turns:
        problems = getattr(turns, "problems", [])
        if problems:
            raise problems[0]
        raise TranscriptError(str(session.path), f"session {session.id} has no assistant turn yet")
    if not turn_part:
        return turn_at(turns, None)
    number = int(turn_part)
    if not 1 <= number <= len(turns):
        raise TranscriptError(
            f"--from {spec}",
            f"session {session.id} has {len(turns)} turns; TURN counts from 1 to {len(turns)}",
        )
    return turns[number - 1]


def find_session(spec: str, project_dir: Path, *, homes: Homes | None = None) -> Session:
    """The session `spec` names: a unique prefix of its id (this project's sessions first). Raises TranscriptError
    when none or several match."""
    session = _session_by_id(spec, project_dir, homes)
    if session is None:
        _no_session(spec, project_dir)
    assert session is not None
    return session


def unique_prefixes(ids: Iterable[str], minimum: int = SHORT_ID) -> dict[str, str]:
    """Each id's shortest prefix (at least `minimum` characters) that no other id starts with, so any prefix shown
    is one `--from` accepts. (Time-ordered ids, UUIDv7, of sessions started together share long prefixes.)"""
    ordered = sorted(set(ids))
    prefixes = {}
    for index, session_id in enumerate(ordered):
        neighbours = ordered[max(index - 1, 0) : index] + ordered[index + 1 : index + 2]
        shared = max((_common_length(session_id, other) for other in neighbours), default=0)
        prefixes[session_id] = session_id[: max(minimum, shared + 1)]
    return prefixes


def _common_length(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def project_root(start: Path) -> Path:
    """The project `start` is in: the nearest ancestor holding `.machine/`, else `.git`, else `start` itself.

    (The store's rule without its MACHINE_HOME override: the sessions belong to where the user works.)"""
    here = _real(start)
    candidates = [here, *here.parents]
    for marker in (".machine", ".git"):
        for directory in candidates:
            if (directory / marker).exists():
                return directory
    return here


# -- finders ---------------------------------------------------------------------------------------------------


def _pi_sessions(homes: Homes) -> Iterator[Session]:
    for path in _glob(homes.pi, "*/*.jsonl"):
        header = _first_object(path)
        if header is None or header.get("type") != "session":
            continue
        yield _file_session("pi", path, header.get("id"), header.get("cwd"))


def _letta_sessions(homes: Homes) -> Iterator[Session]:
    for path in _glob(homes.letta, "*/messages.jsonl"):
        header = _first_object(path)
        if header is None or header.get("type") != "session":
            continue
        yield _file_session("letta-code", path, header.get("id") or path.parent.name, header.get("cwd"))


def _qwen_sessions(homes: Homes) -> Iterator[Session]:
    yield from _tree_sessions("qwen-code", _glob(homes.qwen, "*/chats/*.jsonl"))


def _claude_sessions(homes: Homes) -> Iterator[Session]:
    yield from _tree_sessions("claude-code", _glob(homes.claude, "*/*.jsonl"))


def _tree_sessions(harness: str, paths: list[Path]) -> Iterator[Session]:
    """Claude Code's and Qwen Code's logs: the first line naming a `cwd` places the session."""
    for path in paths:
        cwd = None
        session_id = path.stem
        for obj in _head_objects(path):
            if isinstance(obj.get("cwd"), str):
                cwd = obj["cwd"]
                if isinstance(obj.get("sessionId"), str):
                    session_id = obj["sessionId"]
                break
        if cwd is not None:
            yield _file_session(harness, path, session_id, cwd)


def _codex_sessions(homes: Homes) -> Iterator[Session]:
    for path in _glob(homes.codex, "*/*/*/rollout-*.jsonl"):
        meta = _first_object(path)
        payload = meta.get("payload") if meta and meta.get("type") == "session_meta" else None
        if isinstance(payload, dict):
            yield _file_session("codex", path, payload.get("id"), payload.get("cwd"))


def _opencode_sessions(homes: Homes) -> Iterator[Session]:
    database = homes.opencode
    if not database.is_file():
        return
    try:
        rows = db_sessions(database)
    except TranscriptError as exc:
        homes.notes.append(f"opencode: {database}: {exc.message}; its sessions are not listed")
        return
    for row in rows:
        if row.parent_id:
            continue  # a sub-agent's session: listed under its parent's tool call, not on its own
        yield Session("opencode", row.id, database, row.directory, row.time_updated / 1000)


def _gemini_sessions(homes: Homes, project: Path) -> Iterator[Session]:
    """Gemini CLI keeps a project's chats under a short name (0.40+: `tmp/<name>/.project_root` holds the path)
    or under the sha256 of the path (the header's `projectHash`)."""
    import hashlib

    project_hash = hashlib.sha256(str(project).encode()).hexdigest()
    for path in [
        *_glob(homes.gemini, "*/chats/session-*.jsonl"),
        *_glob(homes.gemini, "*/chats/session-*.json"),
    ]:
        header = _first_object(path) if path.suffix == ".jsonl" else _gemini_document_head(path)
        if header is None or not isinstance(header.get("sessionId"), str):
            continue
        try:
            cwd = (path.parent.parent / ".project_root").read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            cwd = str(project) if header.get("projectHash") == project_hash else ""
        yield _file_session("gemini-cli", path, header["sessionId"], cwd)


def _gemini_document_head(path: Path) -> dict | None:
    """The metadata of a 0.39-style session file (one JSON document; its id comes first)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(_HEAD_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    found = {key: value for key, value in re.findall(r'"(sessionId|projectHash)"\s*:\s*"([^"]*)"', head)}
    return found or None


def _captured_sessions(project: Path) -> Iterator[Session]:
    """The recording proxy's logs in this project's store (they belong to it by where they are)."""
    from machine_lsp.core.store import find_machine_dir

    directory = find_machine_dir(project) / "captured"
    if directory.is_symlink():
        return  # the store never follows a link out of itself
    for path in _glob(directory, "*.jsonl"):
        header = _first_object(path)
        if header is not None and header.get("capture") == "proxy":
            yield _file_session("proxy", path, header.get("session"), str(project))


# -- helpers ---------------------------------------------------------------------------------------------------


def _file_session(harness: str, path: Path, session_id: object, cwd: object) -> Session:
    try:
        updated = path.stat().st_mtime
    except OSError:
        updated = 0.0
    return Session(
        harness,
        session_id if isinstance(session_id, str) and session_id else path.stem,
        path,
        cwd if isinstance(cwd, str) else "",
        updated,
    )


def _glob(root: Path, pattern: str) -> list[Path]:
    try:
        return [path for path in root.glob(pattern) if path.is_file()] if root.is_dir() else []
    except OSError:
        return []


def _head_objects(path: Path) -> Iterable[dict]:
    try:
        with path.open("rb") as handle:
            head = handle.read(_HEAD_BYTES)
    except OSError:
        return
    for line in head.split(b"\n")[:20]:
        if not line.strip():
            continue
        try:
            obj = msgspec.json.decode(line)
        except (msgspec.DecodeError, RecursionError):
            continue  # a line longer than the head, or broken: the next one may do
        if isinstance(obj, dict):
            yield obj


def _first_object(path: Path) -> dict | None:
    return next(iter(_head_objects(path)), None)


def _real(path: Path) -> Path:
    try:
        return path.expanduser().resolve()
    except OSError:
        return path.expanduser().absolute()


def _inside(cwd: str, project: Path) -> bool:
    if not cwd:
        return False
    here = _real(Path(cwd))
    return here == project or project in here.parents


def _count(session: Session) -> None:
    try:
        turns = session.load()
    except TranscriptError as exc:
        session.problem = exc.message
        return
    session.turns = len(turns)
    first = turns[0] if turns else None
    if first is not None:
        prompt = next((text_of(m) for m in first.messages if m.role == "user" and text_of(m).strip()), "")
        session.first_prompt = " ".join(prompt.split())


def _try_load(session: Session, *, trace: bool, thinking: bool) -> list[Turn]:
    try:
        return session.load(trace=trace, thinking=thinking)
    except TranscriptError:
        return []


def split_file_line(spec: str, base: Path) -> tuple[Path, int | None]:
    """`FILE[:LINE]` -> (FILE, LINE or None), the one reading of it for the CLI's `--from` and the editor's `from`.

    A file whose own name ends in `:N` wins over the line reading, and `FILE:` is FILE with no line. A relative
    FILE is looked up from `base` (the CLI's cwd, the editor's workspace), never from wherever the process runs;
    the path comes back as written (relative stays relative)."""
    if (base / Path(spec).expanduser()).exists():
        return Path(spec), None
    path_text, sep, line_text = spec.rpartition(":")
    if sep and path_text and line_text.isdigit():
        return Path(path_text), int(line_text)
    if sep and path_text and not line_text:
        return Path(path_text), None
    return Path(spec), None


def _names_a_file(spec: str, base: Path) -> bool:
    """Whether `spec` is FILE[:LINE] of an existing file (read as :func:`split_file_line` reads it)."""
    return (base / split_file_line(spec, base)[0].expanduser()).exists()


def _looks_like_a_path(spec: str) -> bool:
    return "/" in spec or spec.endswith((".jsonl", ".json", ".db"))


def _session_by_id(prefix: str, project_dir: Path, homes: Homes | None) -> Session | None:
    """The session whose id starts with `prefix`: this project's first, then any project's."""
    if not prefix or _looks_like_a_path(prefix):
        return None
    for project_only in (True, False):
        if project_only:
            sessions = find_sessions(project_dir, homes=homes, count_turns=0)
        else:
            sessions = find_sessions(Path("/"), homes=homes, count_turns=0)
        matches = [s for s in sessions if s.id.startswith(prefix)]
        exact = [s for s in matches if s.id == prefix]
        if exact:
            return exact[0]
        if len(matches) > 1:
            listed = ", ".join(f"{s.id} ({s.harness})" for s in matches)
            raise TranscriptError(
                f"--from {prefix}", f"the prefix matches {len(matches)} sessions: {listed}; type more"
            )
        if matches:
            return matches[0]
    return None


def _no_session(spec: str, project_dir: Path) -> Turn:  # always raises
    raise TranscriptError(
        f"--from {spec}",
        "no such file, and no agent session has that id "
        "(`machine sessions` lists this project's sessions; `--from last` takes the newest)",
    )
