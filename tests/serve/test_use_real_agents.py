"""The configs `machine use --write` writes, read by the real pinned agents: Codex 0.171.0 (`codex exec --profile
machine`, which refused the `[profiles.machine]` written before), Pi 0.73.1 and OpenCode 1.18.33 (its `compaction`
setting included) each send their request to a scripted endpoint on the port the config names. Skipped when the
agents are not installed, except in CI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from serve_helpers import machine

CAPTURE = Path(__file__).resolve().parents[1] / "capture"
if str(CAPTURE) not in sys.path:
    sys.path.insert(0, str(CAPTURE))

from capture_agents import AgentMissing, agent_executable  # noqa: E402
from model_endpoint import ModelEndpoint  # noqa: E402

pytestmark = pytest.mark.agents
CODEX_FLAGS = ["--disable", "plugins", "--disable", "remote_plugin", "--disable", "apps"]
CODEX_FLAGS += ["--disable", "plugin_sharing", "--skip-git-repo-check"]


def _executable(name: str) -> Path:
    try:
        return agent_executable(name)
    except AgentMissing as exc:
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(f"{exc} (CI must run the real agents)")
        pytest.skip(str(exc))


def _world(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    project = tmp_path / "proj"
    (project / ".machine").mkdir(parents=True)
    for sub in ("home", "tmp", "xdg/config", "xdg/data", "xdg/cache", "xdg/state"):
        (tmp_path / sub).mkdir(parents=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path / "home"),
        "TMPDIR": str(tmp_path / "tmp"),
        **{f"XDG_{k.upper()}_HOME": str(tmp_path / "xdg" / k) for k in ("config", "data", "cache", "state")},
    }
    return project, env


def _run(argv: list[str], project: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["timeout", "-k", "5", "120", *argv],
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=150,
    )


def test_codex_runs_with_the_profile_machine_use_wrote(tmp_path: Path) -> None:
    codex = _executable("codex")
    project, env = _world(tmp_path)
    codex_home = tmp_path / "home" / ".codex"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(
        "check_for_update_on_startup = false\n\n[analytics]\nenabled = false\n"
    )
    with ModelEndpoint(model="machine") as endpoint:
        wrote = machine(
            project, "use", "base", "--agent", "codex", "--port", str(endpoint.port), "--write", **env
        )
        assert wrote.returncode == 0, wrote.stderr
        env.update(CODEX_HOME=str(codex_home), MACHINE_LOCAL_KEY="machine-local")
        done = _run([str(codex), "exec", "--profile", "machine", *CODEX_FLAGS, "say hi"], project, env)
        assert done.returncode == 0, done.stderr[-3000:]
        requests = endpoint.model_requests("responses")
        assert requests and requests[0].body["model"] == "machine", done.stderr[-3000:]
        assert "Scripted reply" in done.stdout


def test_pi_answers_through_the_provider_machine_use_wrote(tmp_path: Path) -> None:
    pi = _executable("pi")
    project, env = _world(tmp_path)
    with ModelEndpoint(model="machine") as endpoint:
        wrote = machine(
            project, "use", "base", "--agent", "pi", "--port", str(endpoint.port), "--write", **env
        )
        assert wrote.returncode == 0, wrote.stderr
        env.update(PI_OFFLINE="1", PI_SKIP_VERSION_CHECK="1", PI_TELEMETRY="0")
        done = _run([str(pi), "-p", "say hi"], project, env)
        assert done.returncode == 0, done.stderr[-3000:]
        requests = endpoint.model_requests("chat")
        assert requests and requests[0].body["model"] == "machine", done.stderr[-3000:]
        assert "Scripted reply" in done.stdout


def test_opencode_accepts_the_config_machine_use_wrote(tmp_path: Path) -> None:
    """OpenCode 1.18.33 reads the project's opencode.json as `machine use` writes it (provider, default model and
    `"compaction": {"auto": false}`) and sends its request to the configured port."""
    opencode = _executable("opencode")
    project, env = _world(tmp_path)
    config_dir = (
        tmp_path / "xdg" / "config" / "opencode"
    )  # its first run would npm-install a plugin (FACTS.md)
    (config_dir / "node_modules").mkdir(parents=True)
    plugin = {"@opencode-ai/plugin": "1.18.33"}
    (config_dir / "package.json").write_text(json.dumps({"dependencies": plugin}))
    lock = {"": {"dependencies": plugin}, "node_modules/@opencode-ai/plugin": {"version": "1.18.33"}}
    (config_dir / "package-lock.json").write_text(
        json.dumps({"name": "opencode-config", "lockfileVersion": 3, "requires": True, "packages": lock})
    )
    with ModelEndpoint(model="machine") as endpoint:
        wrote = machine(
            project, "use", "base", "--agent", "opencode", "--port", str(endpoint.port), "--write", **env
        )
        assert wrote.returncode == 0, wrote.stderr
        assert json.loads((project / "opencode.json").read_text())["compaction"] == {"auto": False}
        env.update(
            OPENCODE_DISABLE_AUTOUPDATE="1",
            OPENCODE_DISABLE_LSP_DOWNLOAD="1",
            OPENCODE_DISABLE_DEFAULT_PLUGINS="1",
            OPENCODE_DISABLE_MODELS_FETCH="1",
            OPENCODE_DISABLE_SHARE="1",
        )
        done = _run([str(opencode), "run", "say hi"], project, env)
        assert done.returncode == 0, done.stderr[-3000:]
        requests = endpoint.model_requests("chat")
        assert requests and requests[0].body["model"] == "machine", done.stderr[-3000:]
        assert "Scripted reply" in done.stdout
