"""The local engine, as a package along the cookbook's seams: `local.py` (LocalEngine: the model, the trainer and
its optimizer steps, checkpoints), `local_objectives.py` (the losses on its own log-probs), `local_packing.py`
(those passes packed, each shared prompt once), `local_sampler.py` (sampling and scoring a checkpoint). The registry
names `machine_lsp.engines.local.local`; `LocalEngine` is also reachable here, imported only when asked for (the
package itself stays light)."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "LocalEngine":
        from machine_lsp.engines.local.local import LocalEngine

        return LocalEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
