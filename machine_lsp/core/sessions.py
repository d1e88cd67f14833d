"""Find the agent sessions of a project, newest first, and resolve `--from last` / `--from SESSION-ID[:TURN]`.

Each harness records the directory it ran in; a session belongs to the project when that directory is the project
directory or inside it. Where each harness keeps its sessions, and what in a log places it, is its adapter's
`find_sessions` (core/transcripts: homes come from the environment, so tests and unusual setups can move them);
this module asks every adapter in the registry (`transcripts.ADAPTERS`) and reads nothing itself.

Only a log's first lines are read to place it; turns are counted (the whole log read) for the newest sessions only.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from machine_lsp.core.schema import text_of
from machine_lsp.core.transcripts import (
    HARNESSES,
    TranscriptError,
    Turn,
    find_harness_sessions,
    load_session,
    turn_at,
)
from machine_lsp.core.transcripts.session_files import Homes, Session

__all__ = ["HARNESSES", "Homes", "Session", "find_session", "find_sessions", "project_root", "resolve_from"]

SHORT_ID = 8  # the least an id is shortened to (as git abbreviates hashes); longer where sessions share more


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
    found = [
        session for session in find_harness_sessions(homes, project, harness) if _inside(session.cwd, project)
    ]
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
    turns = load_session(session, trace=trace, thinking=thinking)
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


# -- helpers ---------------------------------------------------------------------------------------------------


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
        turns = load_session(session)
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
        return load_session(session, trace=trace, thinking=thinking)
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
