"""`machine use`: the configuration that points an agent at a checkpoint, printed or merged into its config file.

Local checkpoints are reached through `machine serve` on 127.0.0.1 (model id `machine`: the id stays the same when
the server moves to a newer checkpoint, so the agent's config does not change). `tinker://` sampler checkpoints
are reached through Tinker's own OpenAI- and Anthropic-compatible endpoints, with the checkpoint path as the model
and the key read from the `TINKER_API_KEY` environment variable (never written into a file or printed).

Writing merges: the agent's other providers, profiles and settings are kept; our own entry (`machine`) is replaced;
the agent's default model is set only where none is set yet (otherwise the command line flag is printed).
Formats follow the pinned agents (see docs/SERVE.md): Pi 0.73 `models.json`, Codex 0.171 `config.toml`, Claude Code
2.1 `settings.local.json` `env`, OpenCode 1.18 `opencode.json`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
# Tokens of instructions + tool schemas each agent sends per request, measured against `machine serve` on SmolLM2's
# tokenizer (Pi 0.73.1, Codex 0.171.0 with plugins/apps disabled, Claude Code 2.1.332); OpenCode estimated from chars.
PROMPT_TOKENS = {"pi": 1_550, "codex": 6_600, "claude": 12_900, "opencode": 3_000}


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


@dataclass(frozen=True)
class Endpoint:
    openai_base: str | None
    anthropic_base: str | None
    model: str
    key_env: str | None  # the env var holding the key; None: a fixed non-secret placeholder
    local: bool
    context: int | None


def endpoint_for(address: str, kind: str, *, port: int, keyed: bool) -> Endpoint:
    if kind == "tinker":
        return Endpoint(TINKER_OPENAI_BASE, TINKER_ANTHROPIC_BASE, address, TINKER_KEY_ENV, False, None)
    base = f"http://127.0.0.1:{port}"
    return Endpoint(f"{base}/v1", base, MODEL_ID, SERVE_KEY_ENV if keyed else None, True, LOCAL_CONTEXT)


def _home() -> Path:
    return Path(os.environ.get("HOME") or Path.home())


def _load_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text() or "{}")
    except (OSError, ValueError) as exc:
        raise UseError(f"{path}: not valid JSON ({exc}); fix or move it, then run again") from None
    if not isinstance(data, dict):
        raise UseError(f"{path}: expected a JSON object at the top level")
    return data


def _context_warning(agent: str, ep: Endpoint) -> list[str]:
    need = PROMPT_TOKENS[agent]
    if ep.context is None or need < ep.context // 2:
        return []
    if need >= ep.context:
        return [
            f"{agent} sends about {need:,} tokens of instructions and tools with every request; the checkpoint's "
            f"context is {ep.context:,} tokens, so the server will answer it with a context-length error"
        ]
    return [
        f"{agent} sends about {need:,} tokens of instructions and tools with every request, leaving about "
        f"{ep.context - need:,} of the checkpoint's {ep.context:,}-token context for the conversation: longer "
        "sessions will get a context-length error"
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
                "maxTokens": 1024,
            }
        ],
    }
    data = _load_json(path)
    data.setdefault("providers", {})[PROVIDER] = provider
    settings_path = agent_dir / "settings.json"
    settings = _load_json(settings_path)
    notes = []
    if "defaultProvider" not in settings:
        notes.append(f"sets defaultProvider/defaultModel in {settings_path} (none was set)")
    else:
        notes.append(f"run: pi --provider {PROVIDER} --model {ep.model}")
    cfg = AgentConfig(
        "pi",
        path,
        json.dumps({"providers": {PROVIDER: provider}}, indent=2),
        notes=notes,
        merged=json.dumps(data, indent=2) + "\n",
    )
    if "defaultProvider" not in settings:
        settings.update(defaultProvider=PROVIDER, defaultModel=ep.model)
        cfg.extra_files = {settings_path: json.dumps(settings, indent=2) + "\n"}
    return cfg


def codex_config(ep: Endpoint, project: Path) -> AgentConfig:
    import tomlkit

    if not ep.local:
        raise UseError(
            "Codex speaks only the OpenAI Responses API, and Tinker's OpenAI-compatible endpoint serves Chat "
            "Completions only: use --agent pi, claude or opencode for a tinker:// checkpoint"
        )
    path = Path(os.environ.get("CODEX_HOME") or _home() / ".codex") / "config.toml"
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
    profile = tomlkit.table()
    profile.update({"model": ep.model, "model_provider": PROVIDER})
    try:
        doc = tomlkit.parse(path.read_text()) if path.exists() else tomlkit.document()
    except Exception as exc:  # tomlkit raises its own ParseError subclasses
        raise UseError(f"{path}: not valid TOML ({exc}); fix or move it, then run again") from None
    doc.setdefault("model_providers", tomlkit.table(is_super_table=True))[PROVIDER] = provider
    doc.setdefault("profiles", tomlkit.table(is_super_table=True))[PROVIDER] = profile
    snippet = tomlkit.document()
    snippet["model_providers"] = tomlkit.table(is_super_table=True)
    snippet["model_providers"][PROVIDER] = provider
    snippet["profiles"] = tomlkit.table(is_super_table=True)
    snippet["profiles"][PROVIDER] = profile
    notes = [f"run: codex --profile {PROVIDER}"]
    if not ep.key_env:
        notes.append("Codex wants its env_key set: export MACHINE_LOCAL_KEY=machine-local (not a secret)")
    else:
        notes.append(f"export {ep.key_env} with the server's key before running codex")
    return AgentConfig("codex", path, tomlkit.dumps(snippet), notes=notes, merged=tomlkit.dumps(doc))


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
    data = _load_json(path)
    merged_env = data.setdefault("env", {})
    if not isinstance(merged_env, dict):
        raise UseError(f"{path}: 'env' is not an object")
    merged_env.update(env)
    return AgentConfig(
        "claude",
        path,
        json.dumps({"env": env}, indent=2),
        notes=notes,
        merged=json.dumps(data, indent=2) + "\n",
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
                "limit": {"context": ep.context or 32_768, "output": 1024},
            }
        },
    }
    data = _load_json(path)
    data.setdefault("$schema", "https://opencode.ai/config.json")
    data.setdefault("provider", {})[PROVIDER] = provider
    notes = []
    if "model" not in data:
        data["model"] = f"{PROVIDER}/{ep.model}"
        notes.append(f"sets model = {PROVIDER}/{ep.model} (none was set)")
    else:
        notes.append(f"run: opencode -m {PROVIDER}/{ep.model}")
    return AgentConfig(
        "opencode",
        path,
        json.dumps({"provider": {PROVIDER: provider}}, indent=2),
        notes=notes,
        merged=json.dumps(data, indent=2) + "\n",
    )


BUILDERS = {"pi": pi_config, "codex": codex_config, "claude": claude_config, "opencode": opencode_config}


def config_for(agent: str, ep: Endpoint, project: Path) -> AgentConfig:
    if agent not in BUILDERS:
        raise UseError(f"unknown agent {agent!r}: choose one of {', '.join(AGENTS)}")
    cfg = BUILDERS[agent](ep, project)
    cfg.warnings = _context_warning(agent, ep)
    return cfg


def write(cfg: AgentConfig) -> list[Path]:
    """Write the merged file(s) atomically (temp file + rename); returns the paths written."""
    files: dict[Path, str] = {cfg.path: cfg.merged, **cfg.extra_files}
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.machine-tmp")
        temp.write_text(text)
        os.replace(temp, path)
    return list(files)
