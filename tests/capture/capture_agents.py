"""Run a real coding agent (installed by scripts/setup-agents.sh) against a ModelEndpoint, the way FACTS.md's
harness table describes, and find the session log it wrote.

Each agent runs non-interactively with its own temporary HOME, TMPDIR and XDG dirs, under `timeout`, with stdin
from /dev/null, in a project directory of its own. Imported as a plain module (tests/ is not a package).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from model_endpoint import ModelEndpoint

ROOT = Path(__file__).resolve().parents[2]
AGENTS_DIR = Path(os.environ.get("MACHINE_TOOLS_DIR", ROOT / ".tools")) / "agents"
# Only bounds a hang: one prompt takes 1-3 s against the scripted endpoint, but against `machine serve` on a loaded
# 2-core machine an agent's first request (several thousand prompt tokens) took over 120 s once, and failed a test.
RUN_TIMEOUT_S = 600
MODEL = "m"
GEMINI_MODEL = (
    "gemini-2.5-flash"  # a Gemini model name, as the CLI expects (its model configs are keyed by name)
)


class AgentMissing(Exception):
    """The agent is not installed (run `make agents` / scripts/setup-agents.sh)."""


def agent_executable(name: str) -> Path:
    wrapper = AGENTS_DIR / f"{name}.run"
    if not wrapper.exists():
        raise AgentMissing(
            f"{name} is not installed under {AGENTS_DIR}: run `make agents` (scripts/setup-agents.sh)"
        )
    return wrapper


@dataclass
class AgentRun:
    """One agent installation in a temporary world: `run(prompt)` / `run(prompt, resume=True)`, then `log()`."""

    name: str
    root: Path  # everything the agent writes lives under here
    endpoint: ModelEndpoint
    runs: list[subprocess.CompletedProcess[str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.executable = agent_executable(self.name)
        self.home = self.root / "home"
        self.project = self.root / "project"
        self.debug_log = self.root / "agent-debug.log"  # only agents that can write one (see _env_gemini_cli)
        for sub in ("home", "project", "tmp", "xdg/config", "xdg/data", "xdg/cache", "xdg/state"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        getattr(self, f"_configure_{self.name.replace('-', '_')}")()

    # -- environment -----------------------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "TMPDIR": str(self.root / "tmp"),
            "XDG_CONFIG_HOME": str(self.root / "xdg/config"),
            "XDG_DATA_HOME": str(self.root / "xdg/data"),
            "XDG_CACHE_HOME": str(self.root / "xdg/cache"),
            "XDG_STATE_HOME": str(self.root / "xdg/state"),
            "LANG": "C.UTF-8",
            "NO_COLOR": "1",
            "CI": "true",
        }
        env.update(getattr(self, f"_env_{self.name.replace('-', '_')}")())
        return env

    def _configure_claude_code(self) -> None:
        pass  # environment variables only

    def _env_claude_code(self) -> dict[str, str]:
        return {
            "ANTHROPIC_BASE_URL": self.endpoint.base_url,
            "ANTHROPIC_API_KEY": "dummy",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
        }

    def _configure_codex(self) -> None:
        codex_home = self.home / ".codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        (codex_home / "config.toml").write_text(
            f'model = "{MODEL}"\n'
            'model_provider = "local"\n'
            "check_for_update_on_startup = false\n"
            "\n[model_providers.local]\n"
            'name = "local"\n'
            f'base_url = "{self.endpoint.base_url}/v1"\n'
            'env_key = "LOCAL_KEY"\n'
            'wire_api = "responses"\n'
            "request_max_retries = 0\n"
            "stream_max_retries = 0\n"
            "\n[analytics]\nenabled = false\n"
        )

    def _env_codex(self) -> dict[str, str]:
        return {"CODEX_HOME": str(self.home / ".codex"), "LOCAL_KEY": "dummy"}

    def _configure_pi(self) -> None:
        agent_dir = self.home / ".pi" / "agent"
        agent_dir.mkdir(parents=True, exist_ok=True)
        models = {
            "providers": {
                "local": {
                    "baseUrl": f"{self.endpoint.base_url}/v1",
                    "api": "openai-completions",
                    "apiKey": "dummy",
                    "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
                    "models": [{"id": MODEL, "name": MODEL, "contextWindow": 8192, "maxTokens": 512}],
                }
            }
        }
        settings = {
            "defaultProvider": "local",
            "defaultModel": MODEL,
            "enableInstallTelemetry": False,
            "quietStartup": True,
        }
        (agent_dir / "models.json").write_text(json.dumps(models))
        (agent_dir / "settings.json").write_text(json.dumps(settings))

    def _env_pi(self) -> dict[str, str]:
        return {"PI_OFFLINE": "1", "PI_SKIP_VERSION_CHECK": "1", "PI_TELEMETRY": "0"}

    def _configure_qwen_code(self) -> None:
        pass  # environment variables and flags only

    def _env_qwen_code(self) -> dict[str, str]:
        return {"OPENAI_BASE_URL": f"{self.endpoint.base_url}/v1", "OPENAI_API_KEY": "dummy"}

    def _configure_gemini_cli(self) -> None:
        # The API-key auth (the `gateway` type GOOGLE_GEMINI_BASE_URL selects is refused by 0.61's validator), no
        # folder-trust prompt, no telemetry or update checks.
        settings = {
            "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
            "privacy": {"usageStatisticsEnabled": False},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
            "telemetry": {"enabled": False},
        }
        (self.home / ".gemini").mkdir(parents=True, exist_ok=True)
        (self.home / ".gemini" / "settings.json").write_text(json.dumps(settings))

    def _env_gemini_cli(self) -> dict[str, str]:
        # In a `-p` run Gemini CLI swallows its own console (a failed run can exit 1 with empty stdout and stderr);
        # GEMINI_DEBUG_LOG_FILE keeps what it would have said, for the failure message.
        return {
            "GOOGLE_GEMINI_BASE_URL": self.endpoint.base_url,
            "GEMINI_API_KEY": "dummy",
            "GEMINI_DEBUG_LOG_FILE": str(self.debug_log),
        }

    # -- running ---------------------------------------------------------------------------------------------

    def argv(self, prompt: str, resume: bool, allowed_tools: tuple[str, ...] = ()) -> list[str]:
        exe = str(self.executable)
        if self.name == "claude-code":
            # `--allowedTools` must come after the prompt (before it, it swallows the prompt as a tool name).
            allowed = ["Bash(echo:*)", *allowed_tools]
            return [exe, *(["-c"] if resume else []), "-p", prompt, "--allowedTools", *allowed]
        if self.name == "codex":
            # Without the --disable flags Codex looks up plugin/app hosts in DNS at start.
            flags = ["--disable", "plugins", "--disable", "remote_plugin", "--disable", "apps"]
            flags += ["--disable", "plugin_sharing", "--skip-git-repo-check"]
            if resume:
                return [exe, "exec", *flags, "resume", "--last", prompt]
            return [exe, "exec", *flags, prompt]
        if self.name == "pi":
            return [exe, *(["-c"] if resume else []), "-p", prompt]
        if self.name == "qwen-code":
            # `--yolo`: run tools without asking (there is no terminal to ask on).
            return [exe, "--auth-type", "openai", "-m", MODEL, "--yolo", *(["-c"] if resume else []), prompt]
        if self.name == "gemini-cli":
            return [
                exe,
                "-m",
                GEMINI_MODEL,
                *(["--resume", "latest"] if resume else []),
                "--yolo",
                "-p",
                prompt,
            ]
        raise ValueError(f"no runner for agent {self.name}")

    def run(
        self, prompt: str, *, resume: bool = False, check: bool = True, allowed_tools: tuple[str, ...] = ()
    ) -> subprocess.CompletedProcess[str]:
        """Run one prompt (`resume`: continue the last session). `allowed_tools`: more Claude Code tools to allow."""
        argv = ["timeout", "-k", "5", str(RUN_TIMEOUT_S), *self.argv(prompt, resume, allowed_tools)]
        done = subprocess.run(
            argv,
            cwd=self.project,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S + 30,
        )
        self.runs.append(done)
        if check and done.returncode != 0:
            debug = self.debug_log.read_text(errors="replace")[-6000:] if self.debug_log.exists() else ""
            raise AssertionError(
                f"{self.name} exited {done.returncode} on {prompt!r}\n"
                f"stdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-4000:]}\nits debug log: {debug}"
            )
        return done

    def killed_during_call(self, prompt: str, command: str, *, resume: bool = False) -> None:
        """Run `prompt` (to which the endpoint answers with a shell call of `command`, a slow one) and kill the
        agent once its log holds that call: the session then ends on a call nothing answered, as when a user
        kills the agent mid-call."""
        agent = subprocess.Popen(
            self.argv(prompt, resume),
            cwd=self.project,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: the tool's shell dies with it
        )
        try:
            deadline = time.monotonic() + RUN_TIMEOUT_S
            while not any(command in log.read_text().rpartition(prompt)[2] for log in self.logs()):
                if agent.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"{self.name} ended or hung before logging its call of {command!r}")
                time.sleep(0.1)
        finally:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()

    # -- finding the log -------------------------------------------------------------------------------------

    def logs(self) -> list[Path]:
        """Session logs the agent wrote, oldest first."""
        if self.name == "claude-code":
            found = list((self.home / ".claude" / "projects").glob("*/*.jsonl"))
        elif self.name == "codex":
            found = list((self.home / ".codex" / "sessions").glob("*/*/*/rollout-*.jsonl"))
        elif self.name == "pi":
            found = list((self.home / ".pi" / "agent" / "sessions").glob("*/*.jsonl"))
        elif self.name == "qwen-code":
            found = list((self.home / ".qwen" / "projects").glob("*/chats/*.jsonl"))
        elif self.name == "gemini-cli":
            found = list((self.home / ".gemini" / "tmp").glob("*/chats/session-*.json*"))
        else:
            found = []
        return sorted(found, key=lambda path: path.stat().st_mtime_ns)

    def log(self) -> Path:
        logs = self.logs()
        if not logs:
            raise AssertionError(f"{self.name} wrote no session log under {self.home}")
        return logs[-1]
