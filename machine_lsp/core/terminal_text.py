"""The one rule for printing text that came from a log (an agent's session, a chat file, a note) to a terminal.

Logs hold whatever a model or a tool printed, escape sequences included: `ESC ] 0 ; title BEL` renames the
terminal, `ESC [ 2 J` clears it, a bidi override (U+202E) reverses what follows. Such characters are shown escaped
(`\\x1b`, `\\u202e`), never sent to the terminal; everything else is kept as it is. `--json` output needs none of
this: JSON encoders already escape control characters.
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls (U+0080-U+009F: U+009B is a one-character CSI), and the bidi embedding, override
# and isolate controls. Newline and tab are kept when the caller keeps lines (multi-line output).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_CONTROL_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def for_terminal(text: str, *, keep_lines: bool = False) -> str:
    """`text` with every control character shown escaped; with `keep_lines`, newlines and tabs stay."""
    return (_CONTROL if keep_lines else _CONTROL_LINE).sub(_escaped, text)
