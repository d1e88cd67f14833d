"""The real Codex and OpenCode (installed by scripts/setup-agents.sh), configured by `machine use --write` for a
served model, asked one question each; the answer is read back from the agent's own session log (Codex's rollout
JSONL, OpenCode's SQLite database) with machine-lsp's own readers. Imported as a plain module (tests/ is not a
package)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from serve_helpers import machine

from machine_lsp.core.transcripts import load_turns, turn_at

CODEX_FLAGS = ["--disable", "plugins", "--disable", "remote_plugin", "--disable", "apps"]
CODEX_FLAGS += ["--disable", "plugin_sharing", "--skip-git-repo-check"]
OPENCODE_ENV = {
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_SHARE": "1",
}
# One turn is several thousand prompt tokens prefilled on 2 CPU cores (Codex ~6.3k: ~60 s on a quiet machine,
# OpenCode ~7.7k plus a title request: ~100 s); this bounds a hang on a loaded one.
TURN_TIMEOUT_S = 900


def world(root: Path) -> dict[str, str]:
    """A HOME, TMPDIR and XDG dirs of their own under ROOT, as the environment to run an agent in."""
    for sub in ("home", "tmp", "xdg/config", "xdg/data", "xdg/cache", "xdg/state"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(root / "home"),
        "TMPDIR": str(root / "tmp"),
        **{f"XDG_{k.upper()}_HOME": str(root / "xdg" / k) for k in ("config", "data", "cache", "state")},
    }


def configure(agent: str, project: Path, env: dict[str, str], port: int) -> None:
    """`machine use promoted --agent AGENT --write`, after the setup the agent itself needs to run offline."""
    if agent == "codex":
        codex_home = Path(env["HOME"]) / ".codex"
        codex_home.mkdir(exist_ok=True)
        (codex_home / "config.toml").write_text(
            "check_for_update_on_startup = false\n\n[analytics]\nenabled = false\n"
        )
        env.update(CODEX_HOME=str(codex_home), MACHINE_LOCAL_KEY="machine-local")
    else:  # its first run would npm-install a plugin into its config dir (FACTS.md)
        config_dir = Path(env["XDG_CONFIG_HOME"]) / "opencode"
        (config_dir / "node_modules").mkdir(parents=True, exist_ok=True)
        plugin = {"@opencode-ai/plugin": "1.18.33"}
        lock = {"": {"dependencies": plugin}, "node_modules/@opencode-ai/plugin": {"version": "1.18.33"}}
        (config_dir / "package.json").write_text(json.dumps({"dependencies": plugin}))
        (config_dir / "package-lock.json").write_text(
            json.dumps({"name": "opencode-config", "lockfileVersion": 3, "requires": True, "packages": lock})
        )
        env.update(OPENCODE_ENV)
    done = machine(project, "use", "promoted", "--agent", agent, "--port", str(port), "--write", **env)
    assert done.returncode == 0, done.stderr


def ask(agent: str, executable: Path, project: Path, env: dict[str, str], prompt: str) -> str:
    """Run one prompt non-interactively and return the agent's last answer, as its own log holds it."""
    if agent == "codex":
        argv = [str(executable), "exec", "--profile", "machine", *CODEX_FLAGS, prompt]
    else:
        argv = [str(executable), "run", prompt]
    done = subprocess.run(
        ["timeout", "-k", "5", str(TURN_TIMEOUT_S), *argv],
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TURN_TIMEOUT_S + 30,
    )
    assert done.returncode == 0, f"{agent} exited {done.returncode}: {done.stderr[-3000:]}"
    (log,) = session_logs(agent, env)
    turn = turn_at(load_turns(log), None)
    asked = [m for m in turn.messages if m.role == "user"]
    assert asked and prompt in str(asked[-1].content), turn.messages
    return str(turn.messages[-1].content).strip()


def session_logs(agent: str, env: dict[str, str]) -> list[Path]:
    if agent == "codex":
        return sorted(Path(env["CODEX_HOME"]).glob("sessions/*/*/*/rollout-*.jsonl"))
    database = Path(env["XDG_DATA_HOME"]) / "opencode" / "opencode.db"
    return [database] if database.exists() else []
