"""`machine.eval.split {out?, force?, quiet?}`: make the eval set from the store, as `machine train eval split` does
(scaffold/eval_set.py: held-out tagged rows into the eval file; runs that train on the store leave them out).
Quick file work, in-process; the outcome is shown with `window/showMessage` and is the reply's `message`."""

from __future__ import annotations

from typing import Any

from lsprotocol import types

from machine_lsp.core.store import StoreError, find_project_root
from machine_lsp.lsp.features import SHOWN, CommandError, LanguageFeature
from machine_lsp.lsp.replies import EvalSetReply, to_wire
from machine_lsp.scaffold.eval_set import EvalSetError, make_eval_set


class EvalSetFeature(LanguageFeature):
    def register(self) -> None:
        @self.server.command("machine.eval.split")
        async def split(*arguments: Any) -> Any:
            given = arguments[0] if len(arguments) == 1 and isinstance(arguments[0], dict) else None
            args = dict(given or {})
            try:
                if arguments and given is None:
                    raise CommandError(message="expected a single JSON object argument")
                return to_wire(self.split(args))
            except CommandError as exc:
                if (
                    args.get("quiet") is not True
                ):  # `quiet`: the client words the refusal (VS Code asks to replace)
                    exc.data = SHOWN
                    self._show(types.MessageType.Error, f"machine: {exc.message}")
                raise

    def _show(self, kind: types.MessageType, message: str) -> None:
        self.server.window_show_message(types.ShowMessageParams(type=kind, message=message))

    def split(self, args: dict[str, Any]) -> EvalSetReply:
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
