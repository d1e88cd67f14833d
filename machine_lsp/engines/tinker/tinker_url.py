"""Which Tinker server a job talks to, and whether it is on this machine (stdlib only: the language server and
the CLI ask this before anything heavy is imported)."""

from __future__ import annotations

import os
import urllib.parse

DEFAULT_BASE_URL = "https://tinker.thinkingmachines.dev/services/tinker-prod"
URL_ENV = "TINKER_BASE_URL"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def resolve_base_url(explicit: str | None = None) -> str:
    """`explicit`, else TINKER_BASE_URL, else hosted Tinker. (The jobs pass machine.toml's `[tinker] base_url` as
    `explicit` when TINKER_BASE_URL is unset: the engine reads no project config.)"""
    return (explicit or os.environ.get(URL_ENV) or DEFAULT_BASE_URL).rstrip("/")


def is_local_url(url: str) -> bool:
    """A server on this machine (`machine tinker serve`): it takes no API key and costs nothing."""
    return urllib.parse.urlparse(url).hostname in LOOPBACK_HOSTS
