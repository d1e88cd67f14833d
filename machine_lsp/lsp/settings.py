"""Server settings: which files are chat JSONL (train / eval), debounce, size limits.

Accepted from `initializationOptions` and `workspace/didChangeConfiguration`, either at the top level or under a
`"machine"` key: `{"machine": {"trainGlobs": [...], "evalGlobs": [...], "debounceMs": 60, "maxFileMB": 32}}`.
Two keys describe the client rather than the project: `clientPrompts` (true: the client asks the user for a
code action's `ask` — a note, a rewrite, a prompt — before it runs `machine.tag`; only such clients are offered
those actions) and `jobReplies` (`"onEnd"`: a job command's reply comes when the job ends; `"immediate"`: it comes
at once with the job id, for clients with a short request timeout such as eglot's 10 s). `confirmTimeoutS` (600)
bounds the wait for an answer to a job's Run/Cancel question (confirm.py).
Each value is converted with msgspec into the typed `Settings` struct; a value that does not convert (or a glob
that could cost too much to match) is reported back in `problems` (the server shows them with
`window/showMessage`) and the previous value is kept: nothing is dropped silently.
"""

from __future__ import annotations

import functools
import re
from typing import Annotated, Any, Literal

import msgspec
from wcmatch import glob as wcglob

DEFAULT_TRAIN_GLOBS = ("**/*.jsonl",)
DEFAULT_EVAL_GLOBS = ("**/*eval*.jsonl", "**/*heldout*.jsonl")

#: What one setting may cost: a glob list is matched on every document open, so its size is bounded.
MAX_GLOBS = 32
MAX_GLOB_CHARS = 256
MAX_GLOBSTARS = 3  # each `**` multiplies the matching cost by the path's depth
_GLOB_FLAGS = wcglob.GLOBSTAR | wcglob.BRACE | wcglob.DOTGLOB
_REPEATED_GLOBSTAR = re.compile(r"(?:\*\*/)+")

Globs = Annotated[list[str] | str, msgspec.Meta(description="file globs, posix paths")]


JobReplies = Literal["immediate", "onEnd"]


class _Input(msgspec.Struct, rename="camel", forbid_unknown_fields=False, omit_defaults=True):
    """The settings as the client sends them; every field optional (absent: keep the current value)."""

    train_globs: Globs | None = None
    eval_globs: Globs | None = None
    debounce_ms: Annotated[int, msgspec.Meta(ge=0, le=60_000)] | None = None
    max_file_mb: Annotated[float, msgspec.Meta(ge=0)] | None = msgspec.field(default=None, name="maxFileMB")
    client_prompts: bool | None = None
    job_replies: JobReplies | None = None
    confirm_timeout_s: Annotated[float, msgspec.Meta(gt=0, le=86_400)] | None = msgspec.field(
        default=None, name="confirmTimeoutS"
    )


class Settings(msgspec.Struct, frozen=True):
    train_globs: tuple[str, ...] = DEFAULT_TRAIN_GLOBS
    eval_globs: tuple[str, ...] = DEFAULT_EVAL_GLOBS
    debounce_ms: int = 60
    max_file_mb: float = 32.0
    client_prompts: bool = False
    job_replies: JobReplies = "onEnd"
    # a Run/Cancel question nobody answers declines the job after this many seconds, saying so
    confirm_timeout_s: float = 600.0

    def parse(self, options: Any) -> tuple[Settings, list[str]]:
        """A copy with `options` applied, and a message for each value that was refused (and not applied)."""
        if options is None:
            return self, []
        if not isinstance(options, dict):
            return self, [f"machine settings: expected an object, got {type(options).__name__}"]
        if isinstance(options.get("machine"), dict):
            options = options["machine"]
        changes: dict[str, Any] = {}
        problems: list[str] = []
        for field_name, key in zip(_Input.__struct_fields__, _Input.__struct_encode_fields__, strict=True):
            if key not in options or options[key] is None:
                continue
            try:
                value = getattr(msgspec.convert({key: options[key]}, _Input), field_name)
            except msgspec.ValidationError as exc:
                problems.append(f"machine.{key}: {_reason(exc)}; keeping {_shown(getattr(self, field_name))}")
                continue
            if field_name.endswith("_globs"):
                globs = (value,) if isinstance(value, str) else tuple(value)
                if (problem := glob_problem(globs)) is not None:
                    problems.append(f"machine.{key}: {problem}; keeping {_shown(getattr(self, field_name))}")
                    continue
                value = globs
            changes[field_name] = value
        return msgspec.structs.replace(self, **changes), problems

    def updated(self, options: Any) -> Settings:
        """`parse` without the messages: refused values keep their previous value."""
        return self.parse(options)[0]

    def kind_of(self, path: str) -> str | None:
        """'eval', 'train' or None for a file path (posix)."""
        if _matcher(self.eval_globs).match(path):
            return "eval"
        if _matcher(self.train_globs).match(path):
            return "train"
        return None

    def to_client(self) -> dict[str, Any]:
        return {
            "trainGlobs": list(self.train_globs),
            "evalGlobs": list(self.eval_globs),
            "debounceMs": self.debounce_ms,
        }


def glob_problem(globs: tuple[str, ...]) -> str | None:
    """Why a glob list cannot be used (too many, too long, too many `**`, not a glob), or None."""
    if len(globs) > MAX_GLOBS:
        return f"{len(globs)} globs, at most {MAX_GLOBS}"
    for pattern in globs:
        if len(pattern) > MAX_GLOB_CHARS:
            return f"a glob of {len(pattern)} characters, at most {MAX_GLOB_CHARS}"
        if _anchored(pattern).count("**") > MAX_GLOBSTARS:
            return f"{pattern!r} has more than {MAX_GLOBSTARS} '**'"
        try:
            _matcher((pattern,))
        except (ValueError, re.error) as exc:
            return f"{pattern!r} is not a glob ({exc})"
    return None


def _anchored(pattern: str) -> str:
    """A glob without a leading `/` matches at any folder boundary (like VS Code's file globs from the root);
    runs of `**/` are one `**/`."""
    pattern = _REPEATED_GLOBSTAR.sub("**/", pattern)
    return pattern if pattern.startswith(("/", "**/")) or pattern == "**" else "**/" + pattern


@functools.lru_cache(maxsize=64)
def _matcher(globs: tuple[str, ...]) -> Any:
    if not globs:
        return _NoMatch()
    return wcglob.compile([_anchored(g) for g in globs], flags=_GLOB_FLAGS, limit=1000)


class _NoMatch:
    def match(self, path: str) -> bool:
        return False


def _reason(exc: msgspec.ValidationError) -> str:
    return str(exc).split(" - at ", 1)[0]


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(value) + "]"
    return f"{value:g}" if isinstance(value, float) else str(value)
