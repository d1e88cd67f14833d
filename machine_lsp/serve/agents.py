"""`machine use`: the configuration that points an agent at a checkpoint, printed or merged into its config file.

Local checkpoints are reached through `machine serve` on 127.0.0.1 (model id `machine`: the id stays the same when
the server moves to a newer checkpoint, so the agent's config does not change). `tinker://` sampler checkpoints
are reached through Tinker's own OpenAI- and Anthropic-compatible endpoints, with the checkpoint path as the model
and the key read from the `TINKER_API_KEY` environment variable (never written into a file or printed).

Writing merges: the agent's other providers, profiles and settings are kept; our own entry (`machine`) is replaced;
the agent's default model is set only where none is set yet (otherwise the command line flag is printed). Every
file is read and written by the safe-write rule (core/safe_files.py): no link is followed, a FIFO or device is
refused, an existing file keeps its mode, and a config of the wrong shape is refused with one line naming it.
Formats follow the pinned agents (see docs/SERVE.md): Pi 0.73 `models.json` (+ the project's `.pi/settings.json`),
Codex 0.171 `machine.config.toml` (its profile file; `[profiles.*]` in `config.toml` is refused as legacy), Claude
Code 2.1 `settings.local.json` `env`, OpenCode 1.18 `opencode.json`.
On a small served context (the local 8,192 tokens) the agents' automatic compaction is turned off: Pi's default
reserve of 16,384 tokens would compact after every answer and OpenCode loops on summaries that overflow.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from machine_lsp.core.agent_names import spelled_as
from machine_lsp.core.safe_files import NotRegularFile, read_file_safely, write_file_safely

AGENTS = ("pi", "codex", "claude", "opencode")
PROVIDER = "machine"
MODEL_ID = "machine"
DEFAULT_PORT = 8765
TINKER_OPENAI_BASE = "https://tinker.thinkingmachines.dev/services/tinker-prod/oai/api/v1"
TINKER_ANTHROPIC_BASE = "https://tinker.thinkingmachines.dev/services/tinker-prod/anthropic/api"
TINKER_KEY_ENV = "TINKER_API_KEY"
SERVE_KEY_ENV = "MACHINE_SERVE_API_KEY"
LOCAL_KEY = "machine-local"  # not a secret: the local server without --api-key checks no key
LOCAL_CONTEXT = 8192
MAX_OUTPUT_TOKENS = 1024  # the answer length written into the configs: it needs room in the context too
# Tokens of instructions + tool schemas each agent sends per request, measured against `machine serve` on SmolLM2's
# tokenizer (Pi 0.73.1: 2.3k chars + 4 tools; Codex 0.171.0 with plugins/apps disabled: ~19k chars + 9 tools;
# Claude Code 2.1.332: ~7k chars + 12 tools; OpenCode 1.18.33: ~9.6k chars + 10 tools, 7.7k tokens).
PROMPT_TOKENS = {"pi": 1_550, "codex": 6_600, "claude": 12_900, "opencode": 7_700}
# Below this served context the agents' automatic compaction is switched off (Pi reserves 16,384 by default).
COMPACTION_MIN_CONTEXT = 32_768


class UseError(Exception):
    """This agent cannot be pointed at this checkpoint (the message says why)."""


@dataclass
class AgentConfig:
    agent: str
    path: Path
    text: str  # what is printed / the merged file's content
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    merged: str = ""  # the whole file after merging (for --write)
    extra_files: dict[Path, str] = field(default_factory=dict)  # other files --write updates (Pi's settings)
    project: Path | None = None  # files under it are written from it (no link on the way)


@dataclass(frozen=True)
class Endpoint:
    openai_base: str | None
    anthropic_base: str | None
    model: str
    key_env: str | None  # the env var holding the key; None: a fixed non-secret placeholder
    local: bool
    context: int | None

    @property
    def small_context(self) -> bool:
        return self.context is not None and self.context < COMPACTION_MIN_CONTEXT


def agent_name(agent: object) -> str:
    """The agent as `AGENTS` spells it (`claude-code` -> `claude`); UseError for anything else."""
    name = spelled_as(agent, AGENTS) if isinstance(agent, str) else agent
    if name not in AGENTS:
        raise UseError(f"agent must be one of {', '.join(AGENTS)} (or claude-code), not {agent!r}")
    return str(name)


def agent_alias(agent: str) -> str:
    """argparse `type=` for --agent: the other spelling of an agent becomes the one `AGENTS` lists."""
    return spelled_as(agent, AGENTS)


def check_port(port: object) -> int:
    """A TCP port the local server can listen on; UseError (one line) for 0, negatives, > 65535, non-numbers."""
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise UseError(f"port {port!r} is not a TCP port (1-65535)")
    return port


def endpoint_for(address: str, kind: str, *, port: int, keyed: bool) -> Endpoint:
    if kind == "tinker":
        return Endpoint(TINKER_OPENAI_BASE, TINKER_ANTHROPIC_BASE, address, TINKER_KEY_ENV, False, None)
    base = f"http://127.0.0.1:{check_port(port)}"
    return Endpoint(f"{base}/v1", base, MODEL_ID, SERVE_KEY_ENV if keyed else None, True, LOCAL_CONTEXT)


def _home() -> Path:
    return Path(os.environ.get("HOME") or Path.home())


def _read_text(path: Path, project: Path | None) -> str | None:
    """The file's text (None when missing), read by the safe-write rule: a link or FIFO is refused, not followed."""
    try:
        data = read_file_safely(path, root=_root_for(path, project))
    except NotRegularFile as exc:
        raise UseError(f"{exc}; machine use never follows links or reads special files") from None
    except OSError as exc:
        raise UseError(f"cannot read {path}: {exc.strerror or exc}") from None
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UseError(f"{path}: not UTF-8 text (byte {exc.start}); fix or move it, then run again") from None


def _load_json(path: Path, project: Path | None = None) -> dict[str, Any]:
    text = _read_text(path, project)
    if text is None:
        return {}
    try:
        data = json.loads(text or "{}")
    except ValueError as exc:
        raise UseError(f"{path}: not valid JSON ({exc}); fix or move it, then run again") from None
    if not isinstance(data, dict):
        raise UseError(f"{path}: expected a JSON object at the top level, found {_kind(data)}")
    return data


def _kind(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _object(data: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    """`data[key]` as an object (created when missing); UseError when the file holds something else there."""
    value = data.setdefault(key, {})
    if not isinstance(value, dict):
        raise UseError(
            f"{path}: {key!r} is {_kind(value)}, expected an object; fix or move it, then run again"
        )
    return value


def _context_warning(agent: str, ep: Endpoint) -> list[str]:
    """A warning when the agent's own prompt (instructions + tools) and one answer leave too little of the served
    context for the conversation: none when it leaves at least half, or the context is not known (Tinker)."""
    if ep.context is None:
        return []
    need = PROMPT_TOKENS[agent]
    room = ep.context - need - MAX_OUTPUT_TOKENS
    if room <= 0:
        return [
            f"{agent} sends about {need:,} tokens of instructions and tools with every request; with a "
            f"{MAX_OUTPUT_TOKENS:,}-token answer that does not fit the checkpoint's {ep.context:,}-token context, "
            "so the server will answer it with a context-length error"
        ]
    if room >= ep.context // 2:
        return []
    return [
        f"{agent} sends about {need:,} tokens of instructions and tools with every request, leaving about "
        f"{room:,} of the checkpoint's {ep.context:,}-token context for the conversation after a "
        f"{MAX_OUTPUT_TOKENS:,}-token answer: longer sessions will get a context-length error"
    ]


def pi_config(ep: Endpoint, project: Path) -> AgentConfig:
    agent_dir = Path(os.environ.get("PI_CODING_AGENT_DIR") or _home() / ".pi" / "agent")
    path = agent_dir / "models.json"
    api_key = ep.key_env or LOCAL_KEY  # Pi resolves an environment variable name given as apiKey
    provider = {
        "baseUrl": ep.openai_base,
        "api": "openai-completions",
        "apiKey": api_key,
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
        "models": [
            {
                "id": ep.model,
                "name": f"machine-lsp {ep.model}",
                "contextWindow": ep.context or 32_768,
                "maxTokens": MAX_OUTPUT_TOKENS,
            }
        ],
    }
    data = _load_json(path)
    _object(data, "providers", path)[PROVIDER] = provider
    settings_path = agent_dir / "settings.json"
    settings = _load_json(settings_path)
    cfg = AgentConfig(
        "pi",
        path,
        json.dumps({"providers": {PROVIDER: provider}}, indent=2),
        merged=json.dumps(data, indent=2) + "\n",
        project=project,
    )
    if "defaultProvider" not in settings:
        cfg.notes.append(f"sets defaultProvider/defaultModel in {settings_path} (none was set)")
        settings.update(defaultProvider=PROVIDER, defaultModel=ep.model)
        cfg.extra_files[settings_path] = json.dumps(settings, indent=2) + "\n"
    else:
        cfg.notes.append(f"run: pi --provider {PROVIDER} --model {ep.model}")
    if ep.small_context:
        _pi_no_compaction(cfg, project / ".pi" / "settings.json", ep)
    return cfg


def _pi_no_compaction(cfg: AgentConfig, path: Path, ep: Endpoint) -> None:
    """Pi compacts once the context passes `contextWindow - reserveTokens` (16,384 by default): on a small window
    that is after every answer. Switched off in the project's own settings (Pi merges them over the global ones),
    unless the user chose a compaction setting there."""
    settings = _load_json(path, cfg.project)
    compaction = _object(settings, "compaction", path)
    if "enabled" in compaction:
        if compaction["enabled"] is not False:
            cfg.warnings.append(
                f"{path} keeps Pi's compaction on: with the served {ep.context:,}-token context Pi will "
                'compact after every answer; set "compaction": {"enabled": false} there'
            )
        return
    compaction["enabled"] = False
    cfg.notes.append(f"turns off Pi's compaction in {path} (the served context is {ep.context:,} tokens)")
    cfg.extra_files[path] = json.dumps(settings, indent=2) + "\n"


def codex_config(ep: Endpoint, project: Path) -> AgentConfig:
    """Codex 0.171 reads `--profile NAME` from `$CODEX_HOME/NAME.config.toml` and refuses to start while
    `config.toml` still holds `[profiles.NAME]` or `profile = "NAME"` (what earlier versions of this wrote)."""
    import tomlkit

    if not ep.local:
        raise UseError(
            "Codex speaks only the OpenAI Responses API, and Tinker's OpenAI-compatible endpoint serves Chat "
            "Completions only: use --agent pi, claude or opencode for a tinker:// checkpoint"
        )
    codex_home = Path(os.environ.get("CODEX_HOME") or _home() / ".codex")
    path = codex_home / f"{PROVIDER}.config.toml"
    profile = _codex_profile(ep)
    doc = _load_toml(path)
    for key, value in profile.items():
        if key != "model_providers":
            doc[key] = value
    _table(doc, "model_providers", path)[PROVIDER] = profile["model_providers"][PROVIDER]
    notes = [f"run: codex --profile {PROVIDER}  (or codex exec --profile {PROVIDER} ...)"]
    if not ep.key_env:
        notes.append("Codex wants its env_key set: export MACHINE_LOCAL_KEY=machine-local (not a secret)")
    else:
        notes.append(f"export {ep.key_env} with the server's key before running codex")
    cfg = AgentConfig(
        "codex", path, tomlkit.dumps(profile), notes=notes, merged=tomlkit.dumps(doc), project=project
    )
    _drop_legacy_profile(cfg, codex_home / "config.toml")
    return cfg


def _codex_profile(ep: Endpoint) -> Any:
    import tomlkit

    provider = tomlkit.table()
    provider.update(
        {
            "name": "machine-lsp",
            "base_url": ep.openai_base,
            "env_key": ep.key_env or "MACHINE_LOCAL_KEY",
            "wire_api": "responses",
            "request_max_retries": 0,
            "stream_max_retries": 0,
        }
    )
    profile = tomlkit.document()
    profile.update({"model": ep.model, "model_provider": PROVIDER})
    if ep.context is not None:
        profile["model_context_window"] = ep.context  # Codex has no metadata for our model id
    profile["model_providers"] = tomlkit.table(is_super_table=True)
    profile["model_providers"][PROVIDER] = provider
    return profile


def _load_toml(path: Path) -> Any:
    import tomlkit

    text = _read_text(path, None)
    try:
        return tomlkit.parse(text) if text else tomlkit.document()
    except Exception as exc:  # tomlkit raises its own ParseError subclasses
        raise UseError(f"{path}: not valid TOML ({exc}); fix or move it, then run again") from None


def _table(doc: Any, key: str, path: Path) -> Any:
    import tomlkit

    value = doc.setdefault(key, tomlkit.table(is_super_table=True))
    if not isinstance(value, dict):
        raise UseError(f"{path}: {key!r} is not a table; fix or move it, then run again")
    return value


def _drop_legacy_profile(cfg: AgentConfig, path: Path) -> None:
    """Remove `[profiles.machine]` / `profile = "machine"` from config.toml: Codex refuses `--profile machine`
    while either is there. Everything else in the file stays as it was."""
    import tomlkit

    try:
        doc = _load_toml(path)
    except UseError as exc:  # not ours to fix (a dotfiles link, say): Codex itself names a legacy entry in it
        cfg.notes.append(
            f"left {path} as it is ({exc}); Codex refuses --profile {PROVIDER} if it holds [profiles.{PROVIDER}]"
        )
        return
    profiles = doc.get("profiles")
    changed = False
    if isinstance(profiles, dict) and PROVIDER in profiles:
        del profiles[PROVIDER]
        if not profiles:
            del doc["profiles"]
        changed = True
    if doc.get("profile") == PROVIDER:
        del doc["profile"]
        changed = True
    if changed:
        cfg.notes.append(f"moves the legacy [profiles.{PROVIDER}] out of {path} (Codex 0.171 refuses it)")
        cfg.extra_files[path] = tomlkit.dumps(doc)


def claude_config(ep: Endpoint, project: Path) -> AgentConfig:
    path = project / ".claude" / "settings.local.json"
    env = {
        "ANTHROPIC_BASE_URL": ep.anthropic_base,
        "ANTHROPIC_MODEL": ep.model,
        "ANTHROPIC_SMALL_FAST_MODEL": ep.model,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    notes = []
    if ep.key_env is None:
        env["ANTHROPIC_AUTH_TOKEN"] = LOCAL_KEY
    else:  # a real key never goes into a settings file
        notes.append(f'export ANTHROPIC_API_KEY="${ep.key_env}" before running claude')
    data = _load_json(path, project)
    _object(data, "env", path).update(env)
    return AgentConfig(
        "claude",
        path,
        json.dumps({"env": env}, indent=2),
        notes=notes,
        merged=json.dumps(data, indent=2) + "\n",
        project=project,
    )


def opencode_config(ep: Endpoint, project: Path) -> AgentConfig:
    path = project / "opencode.json"
    key = f"{{env:{ep.key_env}}}" if ep.key_env else LOCAL_KEY
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "machine-lsp",
        "options": {"baseURL": ep.openai_base, "apiKey": key},
        "models": {
            ep.model: {
                "name": f"machine-lsp {ep.model}",
                "limit": {"context": ep.context or 32_768, "output": MAX_OUTPUT_TOKENS},
            }
        },
    }
    data = _load_json(path, project)
    data.setdefault("$schema", "https://opencode.ai/config.json")
    _object(data, "provider", path)[PROVIDER] = provider
    snippet: dict[str, Any] = {"provider": {PROVIDER: provider}}
    notes = []
    if "model" not in data:
        data["model"] = f"{PROVIDER}/{ep.model}"
        notes.append(f"sets model = {PROVIDER}/{ep.model} (none was set)")
    else:
        notes.append(f"run: opencode -m {PROVIDER}/{ep.model}")
    if ep.small_context:
        # OpenCode compacts after the first answer on an 8k model, and the summaries then overflow in a loop.
        compaction = _object(data, "compaction", path)
        compaction.setdefault("auto", False)
        snippet["compaction"] = {"auto": compaction["auto"]}
        if compaction["auto"] is False:
            notes.append(f"turns off automatic compaction (the served context is {ep.context:,} tokens)")
    return AgentConfig(
        "opencode",
        path,
        json.dumps(snippet, indent=2),
        notes=notes,
        merged=json.dumps(data, indent=2) + "\n",
        project=project,
    )


BUILDERS = {"pi": pi_config, "codex": codex_config, "claude": claude_config, "opencode": opencode_config}


def config_for(agent: str, ep: Endpoint, project: Path) -> AgentConfig:
    name = agent_name(agent)
    cfg = BUILDERS[name](ep, project)
    cfg.warnings[:0] = _context_warning(name, ep)
    return cfg


def _root_for(path: Path, project: Path | None) -> Path:
    """Where the no-link walk to `path` starts: the project for its files, HOME for the agents' home configs, else
    the file's own directory (one the user named with PI_CODING_AGENT_DIR / CODEX_HOME)."""
    for root in (project, _home()):
        if root is not None and Path(os.path.abspath(path)).is_relative_to(os.path.abspath(root)):
            return root
    return path.parent


def write(cfg: AgentConfig) -> list[Path]:
    """Write the merged file(s) by the safe-write rule; returns the paths written. UseError (one line) when one
    cannot be written: a link, FIFO or device where the file or a folder on its way should be, a full disk, ..."""
    files: dict[Path, str] = {cfg.path: cfg.merged, **cfg.extra_files}
    for path, text in files.items():
        try:
            write_file_safely(path, text.encode("utf-8"), root=_root_for(path, cfg.project))
        except NotRegularFile as exc:
            raise UseError(
                f"cannot write {exc}; machine use never writes through links or special files"
            ) from None
        except OSError as exc:
            raise UseError(f"cannot write {path}: {exc.strerror or exc}") from None
    return list(files)
