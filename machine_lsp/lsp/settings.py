"""Server settings: which files are chat JSONL (train / eval), debounce, size limits.

Accepted from `initializationOptions` and `workspace/didChangeConfiguration`, either at the top level or under a
`"machine"` key: `{"machine": {"trainGlobs": [...], "evalGlobs": [...], "debounceMs": 60, "maxFileMB": 32}}`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, replace
from typing import Any

DEFAULT_TRAIN_GLOBS = ("**/*.jsonl",)
DEFAULT_EVAL_GLOBS = ("**/*eval*.jsonl", "**/*heldout*.jsonl")


@dataclass(frozen=True)
class Settings:
    train_globs: tuple[str, ...] = DEFAULT_TRAIN_GLOBS
    eval_globs: tuple[str, ...] = DEFAULT_EVAL_GLOBS
    debounce_ms: int = 60
    max_file_mb: float = 32.0
    extra: dict[str, Any] = field(default_factory=dict)

    def updated(self, options: Any) -> Settings:
        """A copy with the recognised keys of `options` applied; unknown keys and bad values are ignored."""
        if not isinstance(options, dict):
            return self
        if isinstance(options.get("machine"), dict):
            options = options["machine"]
        changes: dict[str, Any] = {}
        for key, attr in (("trainGlobs", "train_globs"), ("evalGlobs", "eval_globs")):
            value = options.get(key)
            if isinstance(value, str):
                value = [value]
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                changes[attr] = tuple(value)
        for key, attr, kind in (("debounceMs", "debounce_ms", int), ("maxFileMB", "max_file_mb", float)):
            value = options.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
                changes[attr] = kind(value)
        return replace(self, **changes)

    def kind_of(self, path: str) -> str | None:
        """'eval', 'train' or None for a file path (posix)."""
        if _matches(path, self.eval_globs):
            return "eval"
        if _matches(path, self.train_globs):
            return "train"
        return None


def _matches(path: str, globs: tuple[str, ...]) -> bool:
    return any(_glob_regex(glob).search(path) for glob in globs)


@functools.lru_cache(maxsize=256)
def _glob_regex(glob: str) -> re.Pattern[str]:
    """A glob as a regex on posix paths: `**/` any folders, `*` and `?` never cross `/`, `{a,b}` alternatives.

    A glob without a leading `/` matches at any folder boundary (like VS Code's file globs from the root)."""
    out = []
    i = 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        elif glob[i] == "{" and "}" in glob[i:]:
            end = glob.index("}", i)
            out.append("(?:" + "|".join(re.escape(x) for x in glob[i + 1 : end].split(",")) + ")")
            i = end + 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    prefix = "^" if glob.startswith("/") else "(?:^|/)"
    return re.compile(prefix + "".join(out) + "$")
