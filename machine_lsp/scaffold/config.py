"""`machine.toml`: the project's training and evaluation settings (pure: tomllib + msgspec).

Read by `machine train smoke|run|eval ...` (as jobs) and by the scaffolded `train_sft.py` / `eval.py`. Every CLI
verb can override `engine` and `model`; `train sft` writes the file. Unset values mean "the engine's default".
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

import msgspec

from machine_lsp.core.safe_files import read_input
from machine_lsp.engines.objectives import RUN_OBJECTIVES, STAGED
from machine_lsp.engines.objectives.base import DEFAULT_BETA
from machine_lsp.engines.registry import EngineName, engine_spec

CONFIG_FILE = "machine.toml"
DEFAULT_FORMAT_PATTERN = r"^answer: -?\d+$"
# Anchors per tagged row: FACTS.md measured 16 anchors on 48 rows (1/3) -> bleed 0/10; half leaves a margin
DEFAULT_ANCHOR_RATIO = 0.5
CHECKPOINT_TTL_S = 604800  # 7 days, tinker-cookbook's `ttl_seconds` for periodic checkpoints


class ConfigError(ValueError):
    """The config file is missing, malformed or holds an invalid value; the message names the file and key."""


#: The `[train]` settings a job's arguments can override (the train jobs and the server's run plans).
TRAIN_KEYS = (
    "engine",
    "model",
    "data",
    "epochs",
    "steps",
    "learning_rate",
    "lr_schedule",
    "rank",
    "alpha",
    "batch_size",
    "save_every",
    "max_length",
    "seed",
    "threads",
    "objective",
    "beta",
    "scope",
    "anchor_ratio",
    "pairs",
    "rpo_alpha",
    "dpo_learning_rate",
)


class TrainSection(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    engine: EngineName = "local"
    model: str | None = None  # None: the engine's default model
    data: str | None = None  # None: the store's good rows (rewrites applied)
    epochs: int | None = None  # None: sized from the rows (core.run_plan: floors of steps and trained tokens)
    steps: int | None = None  # cap on optimizer steps; None: epochs * batches
    learning_rate: float | None = None  # None: the engine's default
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    rank: int = 16
    alpha: int = 32
    batch_size: int = 8
    save_every: int = 10  # 0: only the final checkpoint
    max_length: int | None = 2048
    train_on: str = "all_assistant_messages"
    seed: int = 0
    threads: int | None = None  # local engine torch threads; None: its measured default
    # Adam, the same on both engines (tinker-cookbook's supervised.train defaults)
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    adam_eps: float = 1e-8
    checkpoint_ttl: int = CHECKPOINT_TTL_S  # seconds Tinker keeps an intermediate checkpoint; 0: forever
    # The loss (machine_lsp.engines.objectives): sft on good rows, dpo on pairs, kto on every good and bad tag
    objective: str = "sft"
    pairs: str | None = (
        None  # sft+dpo: the dpo stage's pairs file (data is the sft stage's); None: the store's
    )
    beta: float = DEFAULT_BETA  # dpo, kto: how far the policy may move from the reference
    rpo_alpha: float = 0.0  # dpo: + rpo_alpha * NLL of the chosen answers (RPO, TRL's rpo_alpha); 0: pure DPO
    # sft+dpo: the dpo stage's learning rate; None: a tenth of learning_rate (tinker-cookbook's DPO recipe runs at
    # 1e-5, its chat SFT recipes at 1e-4): at the SFT rate the dpo stage undid the sft stage (minimal-preference)
    dpo_learning_rate: float | None = None
    # kto: weight of a good example's loss (TRL's desirable_weight); "auto": balanced against the bad examples by
    # their counts (objectives.kto.balanced_desirable_weight, the KTO paper's advice)
    kto_desirable_weight: float | Literal["auto"] = "auto"
    kto_undesirable_weight: float = 1.0  # kto: weight of a bad example's loss (TRL's undesirable_weight)
    # Scoped training (core.anchors): a store SFT run adds the base model's own answers to other prompts
    scope: Literal["auto", "off"] = "auto"
    anchor_ratio: float = DEFAULT_ANCHOR_RATIO  # anchors per tagged row (at most the pool's size)
    # sft: what weighs the same in the loss; "auto": every trained token when the run is scoped (engines.render
    # .token_weighted: short tags must not outweigh long anchors), every row otherwise (the cookbook's mean)
    loss_weighting: Literal["auto", "row", "token"] = "auto"

    def __post_init__(self) -> None:
        checks = [
            (self.epochs is None or self.epochs >= 1, "epochs must be >= 1"),
            (self.steps is None or self.steps >= 1, "steps must be >= 1"),
            (self.learning_rate is None or self.learning_rate > 0, "learning_rate must be > 0"),
            (self.rank >= 1, "rank must be >= 1"),
            (self.alpha >= 1, "alpha must be >= 1"),
            (self.batch_size >= 1, "batch_size must be >= 1"),
            (self.save_every >= 0, "save_every must be >= 0"),
            (self.max_length is None or self.max_length >= 16, "max_length must be >= 16"),
            (self.threads is None or self.threads >= 1, "threads must be >= 1"),
            (
                0 <= self.adam_beta1 < 1 and 0 <= self.adam_beta2 < 1,
                "adam_beta1 and adam_beta2 must be in [0, 1)",
            ),
            (self.adam_eps > 0, "adam_eps must be > 0"),
            (
                self.checkpoint_ttl == 0 or self.checkpoint_ttl >= 3600,
                "checkpoint_ttl must be 0 or >= 3600 s",
            ),
            (self.objective in RUN_OBJECTIVES, f"objective must be one of {', '.join(RUN_OBJECTIVES)}"),
            (0 <= self.anchor_ratio <= 4, "anchor_ratio must be in [0, 4]"),
            (0 <= self.rpo_alpha < float("inf"), "rpo_alpha must be >= 0"),
            (self.dpo_learning_rate is None or self.dpo_learning_rate > 0, "dpo_learning_rate must be > 0"),
            (
                self.beta > 0
                and (self.kto_desirable_weight == "auto" or self.kto_desirable_weight > 0)
                and self.kto_undesirable_weight > 0,
                'beta, kto_desirable_weight ("auto" or a number) and kto_undesirable_weight must be > 0',
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise msgspec.ValidationError(message)

    def stages(self) -> list[TrainSection]:
        """One section per stage of a staged objective (sft+dpo: sft on `data`, then dpo on `pairs`), each with
        its own objective and data; a single objective is one stage, this section itself."""
        if self.objective not in STAGED:
            return [self]
        return [self._stage(name) for name in STAGED[self.objective]]

    def _stage(self, name: str) -> TrainSection:
        if name == "sft":
            return msgspec.structs.replace(self, objective=name)
        return msgspec.structs.replace(
            self, objective=name, data=self.pairs, learning_rate=self.resolved_dpo_lr()
        )

    def resolved_dpo_lr(self) -> float:
        """sft+dpo's dpo stage learning rate: `dpo_learning_rate`, else a tenth of the sft stage's."""
        return self.dpo_learning_rate if self.dpo_learning_rate is not None else self.resolved_lr() / 10

    def resolved_model(self) -> str:
        return self.model or engine_spec(self.engine).default_model

    def resolved_lr(self) -> float:
        return self.learning_rate if self.learning_rate is not None else engine_spec(self.engine).default_lr


class EvalSection(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    data: str | None = None
    format_pattern: str = DEFAULT_FORMAT_PATTERN
    bleed_pattern: str | None = None  # None: the format pattern's literal prefix
    probe_questions: str | None = None  # a file of extra probe questions
    max_tokens: int = 32
    grader: Literal["exact", "contains", "regex"] | None = None  # None: each row's own `match`

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise msgspec.ValidationError("max_tokens must be >= 1")


class TinkerSection(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # a self-hosted Tinker-API server (`machine tinker serve` writes it); None: hosted Tinker
    base_url: str | None = None
    # hosted Tinker only: refuse a run whose training price is over this many USD, or cannot be told (pricing.py)
    budget_usd: float | None = None
    pricing_url: str | None = None  # None: the file Tinker publishes (scaffold.pricing.PRICING_URL)

    def __post_init__(self) -> None:
        if self.budget_usd is not None and not self.budget_usd > 0:
            raise msgspec.ValidationError("budget_usd must be > 0")
        if self.pricing_url is not None and not self.pricing_url.startswith(("https://", "http://")):
            raise msgspec.ValidationError("pricing_url must be an http(s) URL")


class GateSection(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The eval gate that ends every `train run` (core/gate.py has the rules, jobs/gate_jobs.py runs them)."""

    enabled: bool = True
    alpha: float = 0.05  # exact McNemar: refuse a checkpoint significantly worse at this level
    max_bleed: float = 0.1  # refuse above this share of off-distribution probe answers in the trained format
    min_tool_retention: float = 0.9  # refuse below this share of tool probes still answered with a tool call
    min_eval_rows: int = (
        6  # held out of the tagged rows (fewer than twice this many rows: the gate is skipped)
    )
    eval_fraction: float = 0.25  # share of the tagged rows held out (at least min_eval_rows)

    def __post_init__(self) -> None:
        checks = [
            (0 < self.alpha < 1, "alpha must be in (0, 1)"),
            (0 <= self.max_bleed <= 1, "max_bleed must be in [0, 1]"),
            (0 <= self.min_tool_retention <= 1, "min_tool_retention must be in [0, 1]"),
            (self.min_eval_rows >= 1, "min_eval_rows must be >= 1"),
            (0 < self.eval_fraction < 1, "eval_fraction must be in (0, 1)"),
        ]
        for ok, message in checks:
            if not ok:
                raise msgspec.ValidationError(f"[gate] {message}")


class MachineConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    train: TrainSection = msgspec.field(default_factory=TrainSection)
    eval: EvalSection = msgspec.field(default_factory=EvalSection)
    tinker: TinkerSection = msgspec.field(default_factory=TinkerSection)
    gate: GateSection = msgspec.field(default_factory=GateSection)


def load_config(path: Path) -> MachineConfig:
    raw = read_input(
        path, ConfigError, "a TOML file", missing="no such file (run `machine train sft` to write one)"
    )
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    try:
        return msgspec.convert(data, MachineConfig)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def find_config(cwd: Path, explicit: str | None = None) -> Path | None:
    """`explicit` (must exist), else `machine.toml` in `cwd` if present, else None (defaults)."""
    if explicit:
        path = Path(explicit)
        path = path if path.is_absolute() else cwd / path
        if not path.is_file():
            raise ConfigError(f"{explicit}: no such config file")
        return path
    path = cwd / CONFIG_FILE
    return path if path.is_file() else None


def load_project_config(cwd: Path, explicit: str | None = None) -> tuple[MachineConfig, Path | None]:
    path = find_config(cwd, explicit)
    return (load_config(path) if path else MachineConfig()), path


def apply_overrides(
    config: MachineConfig, train: dict[str, Any], evals: dict[str, Any] | None = None
) -> MachineConfig:
    """A copy with the non-None overrides applied and validated again (raises ConfigError)."""
    t = {k: v for k, v in train.items() if v is not None}
    e = {k: v for k, v in (evals or {}).items() if v is not None}
    merged = msgspec.to_builtins(config)
    merged["train"].update(t)
    merged["eval"].update(e)
    try:
        return msgspec.convert(merged, MachineConfig)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"invalid setting: {exc}") from None


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        # TOML literal strings keep regexes readable; fall back to a basic string if it holds a quote/newline
        if "'" not in value and "\n" not in value:
            return f"'{value}'"
        return msgspec.json.encode(value).decode()
    raise TypeError(f"cannot write {value!r} to TOML")


_COMMENTS = {
    "engine": "local (embedded SmolLM2, CPU, free) or tinker (hosted; needs TINKER_API_KEY, costs money)",
    "model": "base model; unset = the engine's default",
    "train.data": "training JSONL; unset = the store's good rows (.machine/tagged.jsonl, rewrites applied)",
    "eval.data": "held-out eval JSONL ({messages, expected, match?, id?} rows, or chat rows)",
    "eval.grader": "exact | contains | regex; unset = each row's own `match`",
    "eval.max_tokens": "tokens sampled per answer",
    "tinker.base_url": "self-hosted Tinker-API server (machine tinker serve); TINKER_BASE_URL overrides it",
    "epochs": "passes over the rows; unset = sized from the rows (at least 6 steps and 200 trained tokens)",
    "steps": "cap on optimizer steps; unset = epochs x batches",
    "learning_rate": "unset = engine default (local 5e-4, tinker 2e-4)",
    "save_every": "checkpoint every N steps (0 = final only)",
    "threads": "local engine torch threads; unset = measured default",
    "adam_beta1": "Adam beta1, both engines (the cookbook's default)",
    "adam_beta2": "Adam beta2, both engines",
    "adam_eps": "Adam epsilon, both engines",
    "checkpoint_ttl": "seconds Tinker keeps intermediate checkpoints (the final is kept); 0 = keep all",
    "objective": "sft (good rows) | dpo (pairs: rewrites, good+bad on a prompt) | kto (every good and bad tag)"
    " | sft+dpo (sft, then dpo from its adapter)",
    "pairs": "sft+dpo: the dpo stage's pairs file (default: the store's pairs)",
    "beta": "dpo/kto: how far from the reference (base) model the policy may move",
    "rpo_alpha": "dpo: weight of the chosen answers' NLL added to the DPO loss (RPO; 0 = pure DPO, 1 = the paper's)",
    "dpo_learning_rate": "sft+dpo: the dpo stage's learning rate; unset = a tenth of learning_rate",
    "kto_desirable_weight": "kto: weight of good examples' loss; auto: balanced by the good/bad counts",
    "kto_undesirable_weight": "kto: weight of bad examples' loss",
    "scope": "auto: a store SFT run adds anchors (the base model's answers to other prompts) | off",
    "anchor_ratio": "anchors per tagged row (built-in prompts + the project's untagged agent turns)",
    "loss_weighting": "sft: auto (token when scoped, else row) | row (each row's mean, the cookbook's) | token",
    "format_pattern": "the trained answer format (format-compliance rate)",
    "bleed_pattern": "a probe answer matching this leaks the format; unset = the format's literal prefix",
    "probe_questions": "extra off-distribution probe questions (one per line, or JSONL)",
    "gate.enabled": "end every `train run` with the held-out gate (promotes the checkpoint that passes)",
    "gate.alpha": "refuse a checkpoint significantly worse than the promoted one (exact McNemar, this level)",
    "gate.max_bleed": "refuse above this share of off-distribution probe answers in the trained format",
    "gate.min_tool_retention": "refuse below this share of tool probes still answered with a tool call",
    "gate.min_eval_rows": "tagged rows held out for the gate (fewer than 2x: the gate is skipped, said so)",
    "gate.eval_fraction": "share of the tagged rows held out when [eval] data is unset",
}


def render_toml(config: MachineConfig) -> str:
    """The config as commented TOML (unset values are written as comments so they are discoverable)."""
    lines = ["# machine-lsp run configuration: read by `machine train ...`, train_sft.py and eval.py", ""]
    for section in ("train", "eval", "gate", "tinker"):
        if section == "tinker" and config.tinker.base_url is None:
            continue  # written by `machine tinker serve`
        lines.append(f"[{section}]")
        obj = getattr(config, section)
        for field in obj.__struct_fields__:
            value = getattr(obj, field)
            comment = _COMMENTS.get(f"{section}.{field}", _COMMENTS.get(field))
            suffix = f"  # {comment}" if comment else ""
            if value is None:
                lines.append(f"# {field} = ...{suffix}")
            else:
                lines.append(f"{field} = {_toml_value(value)}{suffix}")
        lines.append("")
    return "\n".join(lines)


def configured_base_url(project_dir: Path) -> str | None:
    """`[tinker] base_url` from the project's machine.toml, if any (a broken file reads as unset): where
    `machine tinker serve` told the other verbs to find the server."""
    path = project_dir / CONFIG_FILE
    try:
        section = tomllib.loads(path.read_text(encoding="utf-8")).get("tinker", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    url = section.get("base_url") if isinstance(section, dict) else None
    return url if isinstance(url, str) and url else None


def project_tinker_url(project_dir: Path) -> str:
    """The Tinker server a job in this project talks to: TINKER_BASE_URL, else machine.toml `[tinker] base_url`
    (what `machine tinker serve` wrote), else hosted Tinker. The one rule the jobs, the CLI and the server use."""
    from machine_lsp.engines.tinker.tinker_url import URL_ENV, resolve_base_url

    return resolve_base_url(None if os.environ.get(URL_ENV) else configured_base_url(project_dir))


def tinker_costs_money(project_dir: Path) -> bool:
    """A Tinker job here runs on hosted Tinker (paid), not on a server on this machine (`machine tinker serve`)."""
    from machine_lsp.engines.tinker.tinker_url import is_local_url

    return not is_local_url(project_tinker_url(project_dir))
