"""The Tinker service as the engine reaches it: the key and URL checks, `preflight`, calls bounded in time (the
SDK can block for minutes in nested retries), the SDK's errors translated into one precise line, and the
`tinker://` checkpoint paths. No training or sampling here: `tinker_trainer.py` does those, `tinker_engine.py`
ties them into the `Engine`.

The key is read by the SDK only; this module never prints, logs or stores it (errors name the variable).
"""

from __future__ import annotations

import concurrent.futures
import os
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from machine_lsp.core.redact import redact_url, redact_urls
from machine_lsp.engines.base import TINKER_SCHEME, EngineError
from machine_lsp.engines.tinker.tinker_url import URL_ENV, resolve_base_url

KEY_ENV = "TINKER_API_KEY"
PREFLIGHT_TIMEOUT_S = 20.0
CALL_TIMEOUT_S = 600.0  # one forward_backward / optim_step / save on a healthy service
CREATE_TIMEOUT_S = 900.0  # model creation can queue
LIVENESS_CHECK_S = 5.0  # a call in flight checks this often that the server still accepts connections
NOT_LOADED = " not loaded"  # SkyRL tx: "Model <run> not loaded", a checkpoint whose run lost its adapter
LOCAL_PLACEHOLDER_KEY = "tml-local-server"  # not a secret: a local server ignores it

T = TypeVar("T")


class TinkerUnavailable(EngineError):
    """The Tinker service cannot be used right now (no key, bad key, unreachable, rejected)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason  # missing-key | bad-key | refused | unresolvable | timeout | rejected | error


class PreflightResult(msgspec.Struct):
    base_url: str
    seconds: float
    models: list[str] | None = None


def _scrub(text: str) -> str:
    """Remove the API key from a message, should an exception ever carry it."""
    key = os.environ.get(KEY_ENV)
    if key and len(key) >= 4:
        text = text.replace(key, "<redacted>")
    return redact_urls(text)  # and credentials in a URL (TINKER_BASE_URL=https://user:secret@host)


def bounded_call(fn: Callable[[], T], timeout: float, what: str, url: str) -> T:
    """Run a blocking SDK call in a daemon thread; raise TinkerUnavailable(timeout) if it does not finish in time."""
    url = redact_url(url)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=target, name=f"tinker-{what}", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise TinkerUnavailable(
            f"Tinker at {url} did not answer within {timeout:.0f} s ({what}); check the network and "
            f"{URL_ENV}, or try again later",
            "timeout",
        )
    if "error" in box:
        raise translate_error(box["error"], what, url) from None
    return box["value"]


def translate_error(exc: BaseException, what: str, url: str) -> BaseException:
    """SDK exceptions -> precise, key-free TinkerUnavailable/EngineError; anything else unchanged."""
    url = redact_url(url)
    if isinstance(exc, EngineError):
        return exc
    try:
        import tinker
    except ImportError:  # pragma: no cover - tinker is a dependency
        return exc
    message = _scrub(str(exc))
    if isinstance(exc, tinker.AuthenticationError | tinker.PermissionDeniedError):
        return TinkerUnavailable(
            f"Tinker at {url} rejected the API key in {KEY_ENV} ({what}: HTTP {exc.status_code}); "
            "check the key (tinker auth login, or the console)",
            "rejected",
        )
    if isinstance(exc, tinker.APIConnectionError):
        return TinkerUnavailable(f"cannot reach Tinker at {url} ({what}): {message}", "refused")
    if isinstance(exc, tinker.APIStatusError):
        return EngineError(f"Tinker {what} failed with HTTP {exc.status_code}: {message}")
    if isinstance(exc, tinker.TinkerError):
        lowered = message.lower()
        if "api_key" in lowered and "must be set" in lowered:
            return TinkerUnavailable(
                f"no Tinker API key: set {KEY_ENV} (a key starting with 'tml-') or run `tinker auth login`; "
                "or use --engine local, which needs no key",
                "missing-key",
            )
        if "tml-" in lowered and "prefix" in lowered:
            return TinkerUnavailable(
                f"{KEY_ENV} is set but is not a Tinker API key (keys start with 'tml-')", "bad-key"
            )
        return EngineError(f"Tinker {what} failed: {message}")
    return exc


def check_reachable(url: str, timeout: float = 5.0) -> None:
    """A TCP connection to the service's host and port, so a dead endpoint is reported in seconds."""
    parsed = urllib.parse.urlparse(url)
    url = redact_url(url)  # for the messages below
    if parsed.scheme not in {"http", "https"} or not parsed.hostname:
        raise TinkerUnavailable(f"{URL_ENV}={url!r} is not an http(s) URL", "error")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname, port), timeout=timeout):
            return
    except ConnectionRefusedError:
        raise TinkerUnavailable(
            f"cannot reach Tinker at {url}: connection refused on {parsed.hostname}:{port} "
            f"(is {URL_ENV} right and the service running?)",
            "refused",
        ) from None
    except socket.gaierror as exc:
        raise TinkerUnavailable(
            f"cannot reach Tinker at {url}: host {parsed.hostname!r} does not resolve ({exc.strerror})",
            "unresolvable",
        ) from None
    except TimeoutError:
        raise TinkerUnavailable(
            f"cannot reach Tinker at {url}: no TCP answer from {parsed.hostname}:{port} within {timeout:.0f} s",
            "timeout",
        ) from None
    except OSError as exc:
        raise TinkerUnavailable(f"cannot reach Tinker at {url}: {exc.strerror or exc}", "refused") from None


def check_key_format() -> None:
    """A set key must look like a Tinker key; an unset key is left to the SDK (it may use a stored login)."""
    key = os.environ.get(KEY_ENV)
    if key is None:
        return
    if not key.strip():
        raise TinkerUnavailable(f"{KEY_ENV} is set but empty", "bad-key")
    if not (key.startswith("tml-") or key.startswith("eyJ")):
        raise TinkerUnavailable(
            f"{KEY_ENV} is set but is not a Tinker API key (keys start with 'tml-')", "bad-key"
        )


def preflight(
    url: str | None = None, timeout: float = PREFLIGHT_TIMEOUT_S, started: float | None = None
) -> PreflightResult:
    """Check, within `timeout` seconds of `started` (a time.monotonic() value, default now), that training on
    Tinker can start; raise TinkerUnavailable otherwise.

    Order: key format; the SDK's own credential resolution (missing key fails there at once, before any network);
    a TCP connection to the endpoint; then one authenticated request (the server's capabilities).
    """
    started = time.monotonic() if started is None else started
    url = resolve_base_url(url)
    shown = redact_url(url)
    check_key_format()
    import tinker

    deadline = started + timeout
    box: dict[str, Any] = {}

    def call() -> list[str]:
        client = tinker.RestClient(base_url=url)
        caps = client.get_server_capabilities().result()
        return [m.model_name for m in caps.supported_models if m.model_name]

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc

    worker = threading.Thread(target=target, name="tinker-preflight", daemon=True)
    worker.start()
    worker.join(min(1.0, timeout / 4))  # credential errors surface here, before any network
    if "error" in box:
        raise translate_error(box["error"], "preflight", shown) from None
    if worker.is_alive():
        check_reachable(url, timeout=max(0.5, min(5.0, deadline - time.monotonic())))
        worker.join(max(0.0, deadline - time.monotonic()))
    if worker.is_alive():
        raise TinkerUnavailable(
            f"Tinker at {shown} accepted a connection but did not answer within {timeout:.0f} s; "
            "the service may be down or overloaded, try again later",
            "timeout",
        )
    if "error" in box:
        raise translate_error(box["error"], "preflight", shown) from None
    return PreflightResult(base_url=shown, seconds=time.monotonic() - started, models=box.get("value"))


def wait_future(future: Any, timeout: float, what: str, service_url: str) -> Any:
    """An SDK future's result, waited on with its own `result(timeout=)` in slices of LIVENESS_CHECK_S.

    Between slices the server must still accept TCP connections: the SDK retries a refused connection for
    minutes (nested retries), so a server that died mid-call (a crash, `machine tinker stop`, a reboot) would
    otherwise hold the job for up to `timeout`. A server that is alive but busy (compiling a new shape) still
    accepts connections and is waited for. Raises TinkerUnavailable (timeout | refused | ...) or EngineError.
    """
    url = redact_url(service_url)
    deadline = time.monotonic() + timeout
    misses = 0  # consecutive failed connection checks: two in a row (>= LIVENESS_CHECK_S apart) end the wait
    while True:
        remaining = deadline - time.monotonic()
        try:
            return future.result(timeout=max(0.0, min(LIVENESS_CHECK_S, remaining)))
        except (TimeoutError, concurrent.futures.TimeoutError):
            if remaining <= LIVENESS_CHECK_S:
                raise TinkerUnavailable(
                    f"Tinker at {url} did not finish {what} within {timeout:.0f} s", "timeout"
                ) from None
        except Exception as exc:
            raise translate_error(exc, what, url) from None
        try:
            check_reachable(service_url, timeout=LIVENESS_CHECK_S)
            misses = 0
        except TinkerUnavailable as exc:
            misses += 1
            if misses >= 2:
                detail = str(exc).split(": ", 1)[-1]
                raise TinkerUnavailable(
                    f"lost the Tinker server at {url} during {what}: {detail}", exc.reason
                ) from None


def split_tinker_path(address: str) -> tuple[str, str, str]:
    """`tinker://<run>/<kind>/<name>` -> (run, kind, name); precise error otherwise."""
    if not address.startswith(TINKER_SCHEME):
        raise EngineError(
            f"not a Tinker checkpoint address: {address!r} (expected tinker://<run>/<kind>/<name>)"
        )
    parts = address[len(TINKER_SCHEME) :].split("/")
    if len(parts) != 3 or not all(parts) or parts[1] not in {"weights", "sampler_weights"}:
        raise EngineError(
            f"malformed Tinker checkpoint address {address!r}: expected tinker://<run>/weights/<name> "
            "or tinker://<run>/sampler_weights/<name>"
        )
    return parts[0], parts[1], parts[2]


def state_path_for(address: str) -> str:
    """The training-state path (for resume) of a checkpoint saved by `TinkerTrainer.save`."""
    run, _, name = split_tinker_path(address)
    return f"{TINKER_SCHEME}{run}/weights/{name}"


def sampler_path_for(address: str) -> str:
    run, _, name = split_tinker_path(address)
    return f"{TINKER_SCHEME}{run}/sampler_weights/{name}"
