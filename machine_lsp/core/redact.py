"""Secrets out of what is stored and printed: credentials in a URL's userinfo (`https://user:secret@host/`).

`redact_url` is the one place a service URL (e.g. TINKER_BASE_URL) is made fit to record or print; `redact_urls`
does the same to every URL inside a text (an SDK's error message, a log line, a JSON document).
"""

from __future__ import annotations

import re
import urllib.parse

REDACTED = "***"

# scheme://userinfo@ - the userinfo runs up to the last '@' before the path, query or fragment.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/?#\s\"'<>\\]*)@")


def redact_url(url: str) -> str:
    """`url` without the credentials in its userinfo: `https://user:pw@host/x` -> `https://***@host/x`."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return redact_urls(url)
    if "@" not in parts.netloc:
        return redact_urls(url)  # nothing in the authority; a URL-looking text may still hide one
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{REDACTED}@{host}"))


def redact_urls(text: str) -> str:
    """`text` with the userinfo of every `scheme://user:pw@host` in it replaced by `***`."""
    return _USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)


def redact_urls_bytes(data: bytes) -> bytes:
    """The same for bytes (an event line, a stderr chunk, a JSON file); other bytes are kept as they are."""
    if b"://" not in data or b"@" not in data:
        return data
    return redact_urls(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
