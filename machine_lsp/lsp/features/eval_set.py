"""`machine.eval.split {out?, force?, quiet?}`: make the eval set from the store, as `machine train eval split` does
(scaffold/eval_set.py: held-out tagged rows into the eval file; runs that train on the store leave them out).
Quick file work, in-process; the outcome is shown with `window/showMessage` and is the reply's `message`."""

from __future__ import annotations

from typing import Any

from lsprotocol import types

from machine_lsp.core.store import StoreError, find_project_root
from machine_lsp.lsp.features import CommandError, CommandMethod, LanguageFeature
from machine_lsp.lsp.replies import EvalSetReply
from machine_lsp.scaffold.eval_set import EvalSetError, make_eval_set


class EvalSetFeature(LanguageFeature):
    def commands(self) -> dict[str, CommandMethod]:
        return {"machine.eval.split": self.split}

    def _show(self, kind: types.MessageType, message: str) -> None:
        self.server.window_show_message(types.ShowMessageParams(type=kind, message=message))

    async def split(self, args: dict[str, Any]) -> EvalSetReply:
        out = args.get("out")
        if out is not None and (not isinstance(out, str) or not out):
            raise CommandError(message="'out' must be a file name (the eval file to write)")
        try:
            project = find_project_root(self.server.project_start(args.get("uri")))
            report = make_eval_set(project, out, force=args.get("force") is True)
        except (EvalSetError, StoreError) as exc:
            raise CommandError(message=" ".join(str(exc).split())) from None
        self._show(types.MessageType.Info, f"machine: {report.message}")
        return EvalSetReply(**{f: getattr(report, f) for f in EvalSetReply.__struct_fields__})
