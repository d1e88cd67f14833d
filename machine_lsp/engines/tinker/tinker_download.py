"""A `tinker://` checkpoint's adapter files on local disk, through the tinker SDK 0.38 (`machine export adapter`).

SDK 0.38 downloads "external weights" only (`RestClient.get_external_weights_urls`: one signed URL per file). It
has no call for a sampler checkpoint's archive any more (`get_checkpoint_archive_url*` is gone; its own `tinker
checkpoint download` refuses sampler paths), so the download goes the way that command goes for a training
checkpoint: the checkpoint's training state (`tinker://RUN/weights/NAME`, which our runs save beside every sampler
checkpoint) is loaded into a new LoRA training client (base model and rank from `get_weights_info_by_tinker_path`;
not `create_training_client_from_state`, which SkyRL tx answers 422), saved with `save_weights_external`, each file
fetched from its signed URL, and the temporary export deleted.

SkyRL tx 0.3.0 (`machine tinker serve`) serves neither `save_weights_external` nor `external_weights_urls`: there
the download stops at `save_weights_external` with HTTP 404, said in one line (tests/tinker_server).
"""

from __future__ import annotations

import shutil
import urllib.request
import warnings
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from machine_lsp.engines.base import EngineError
from machine_lsp.engines.tinker.tinker_service import bounded_call, state_path_for

EXPORT_NAME = "machine-export"
EXPORT_TTL_S = 3600  # the temporary export expires by itself if deleting it fails
FETCH_TIMEOUT_S = 600


def download(engine: Any, checkpoint: str, out: Path, progress: Callable[[str], None]) -> dict[str, Any]:
    """The files of `checkpoint`'s adapter (Tinker's format) written into the new directory `out`; returns the
    weights info (`base_model`, `lora_rank`). EngineError (one line) when a step fails."""
    with warnings.catch_warnings():  # SDK 0.38 warns that create_rest_client and load_state are deprecated
        warnings.simplefilter("ignore", FutureWarning)
        return _download(engine, checkpoint, out, progress)


def _download(engine: Any, checkpoint: str, out: Path, progress: Callable[[str], None]) -> dict[str, Any]:
    service = engine.service()

    def call(fn: Callable[[], Any], what: str) -> Any:
        return bounded_call(fn, engine.create_timeout, what, engine.base_url)

    rest = call(service.create_rest_client, "create_rest_client")
    state = state_path_for(checkpoint)
    info = call(
        lambda: rest.get_weights_info_by_tinker_path(state).result(), "get_weights_info_by_tinker_path"
    )
    rank = int(info.lora_rank or 32)
    progress(f"loading {state} ({info.base_model}, LoRA rank {rank}) into a new training client")
    client = call(
        lambda: service.create_lora_training_client(base_model=info.base_model, rank=rank).result(),
        "create_lora_training_client",
    )
    call(lambda: client.load_state(state).result(), "load_state")
    progress("exporting it as external weights (save_weights_external)")
    export = call(
        lambda: client.save_weights_external(EXPORT_NAME, ttl_seconds=EXPORT_TTL_S).result().path,
        "save_weights_external",
    )
    try:
        urls = call(lambda: rest.get_external_weights_urls(export).result().urls, "get_external_weights_urls")
        out.mkdir(parents=True)
        for name, url in sorted(urls.items()):
            progress(f"downloading {name}")
            _fetch(url, out, name)
    finally:
        try:
            call(lambda: rest.delete_checkpoint_from_tinker_path(export).result(), "delete the export")
        except EngineError as exc:
            progress(
                f"could not delete the temporary export {export} ({exc}); it expires in {EXPORT_TTL_S} s"
            )
    return {"base_model": info.base_model, "lora_rank": rank}


def _fetch(url: str, out: Path, name: str) -> Path:
    """One file of the export into `out` (a name that leaves `out`, or a link in the way, is refused)."""
    parts = PurePosixPath(name).parts
    if not parts or PurePosixPath(name).is_absolute() or ".." in parts:
        raise EngineError(f"the export names an unsafe file {name!r}; nothing of it is used")
    target = out.joinpath(*parts)
    if target.is_symlink():
        raise EngineError(f"{target} is a symbolic link; refusing to write through it")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.part")
    with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as response, partial.open("xb") as sink:
        shutil.copyfileobj(response, sink)
    partial.replace(target)
    return target
