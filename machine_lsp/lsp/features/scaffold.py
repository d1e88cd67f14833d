"""Scaffolds and eval results, quick file work in-process like the CLI: `machine.train.sft` (train_sft.py +
machine.toml, `machine train sft`), `machine.eval.init` (eval.py, `machine train eval init`) and
`machine.eval.compare` (two eval results side by side, with McNemar's p)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from lsprotocol import types

from machine_lsp.core.verb_registry import palette_title
from machine_lsp.lsp.arguments import path_arg
from machine_lsp.lsp.features import CommandError, CommandMethod, LanguageFeature
from machine_lsp.lsp.replies import CompareReply, WroteReply

TRAIN_KEYS = ("engine", "model", "epochs", "steps", "learning_rate", "rank", "batch_size", "save_every")


class ScaffoldFeature(LanguageFeature):
    def commands(self) -> dict[str, CommandMethod]:
        return {
            "machine.train.sft": self.train_sft,
            "machine.eval.init": self.eval_init,
            "machine.eval.compare": self.eval_compare,
        }

    async def train_sft(self, args: dict[str, Any]) -> WroteReply:
        from machine_lsp.core.store import find_project_root
        from machine_lsp.scaffold.config import ConfigError, MachineConfig, apply_overrides
        from machine_lsp.scaffold.writer import ScaffoldExists, write_train_scaffold

        project = find_project_root(self.server.project_start(args.get("uri")))
        data = path_arg(args, "data_uri", "data")
        if data is not None and not (project / data).is_file():
            raise CommandError(message=f"{data}: no such file")
        train = {key: args.get(key) for key in TRAIN_KEYS} | {"data": data}
        try:
            config = apply_overrides(MachineConfig(), train, {"data": args.get("eval_data")})
            force = bool(args.get("force"))
            written = write_train_scaffold(project, config, command="machine.train.sft", force=force)
        except (ConfigError, ScaffoldExists) as exc:
            raise CommandError(message=str(exc)) from None
        # The next steps by their palette titles (the verb registry's), never their command ids.
        smoke, train = palette_title("machine.train.smoke"), palette_title("machine.train.run")
        return self._wrote(written, f"next: {smoke}, then {train} (engine: {config.train.engine})")

    async def eval_init(self, args: dict[str, Any]) -> WroteReply:
        from machine_lsp.core.store import find_project_root
        from machine_lsp.scaffold.writer import ScaffoldExists, write_default_config, write_eval_scaffold

        project = find_project_root(self.server.project_start(args.get("uri")))
        try:
            written = write_eval_scaffold(project, command="machine.eval.init", force=bool(args.get("force")))
        except ScaffoldExists as exc:
            raise CommandError(message=str(exc)) from None
        config = write_default_config(project)
        if config is not None:
            written.append(config)
        return self._wrote(
            written,
            f"next: {palette_title('machine.eval.baseline')}, on an eval set (EVAL.jsonl: chat rows with an expected "
            "answer)",
        )

    async def eval_compare(self, args: dict[str, Any]) -> CompareReply:
        from machine_lsp.core import evals

        a = path_arg(args, "a_uri", "a", required=True)
        b = path_arg(args, "b_uri", "b", required=True)
        try:
            comparison = evals.compare(evals.load_result(Path(a)), evals.load_result(Path(b)))  # type: ignore[arg-type]
        except (OSError, ValueError, msgspec.MsgspecError) as exc:
            raise CommandError(message=f"cannot compare: {exc}") from None
        message = (
            f"{comparison.b_name} vs {comparison.a_name}: {comparison.a_accuracy:.0%} → {comparison.b_accuracy:.0%}"
            f" (Δ {comparison.delta:+.0%}, +{comparison.gained}/-{comparison.lost}, McNemar p={comparison.mcnemar_p:.3g})"
        )
        self._show(message)
        return CompareReply(message=message, comparison=comparison)

    def _wrote(self, written: list[Path], hint: str) -> WroteReply:
        message = "wrote " + ", ".join(p.name for p in written) + f" · {hint}"
        self._show(message)
        return WroteReply(written=[str(p) for p in written], message=message)

    def _show(self, message: str) -> None:
        self.server.window_show_message(types.ShowMessageParams(type=types.MessageType.Info, message=message))
