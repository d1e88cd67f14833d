"""`machine use`: printed and written agent configs, merged without clobbering, keys never printed."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from serve_helpers import REPO, machine

TINKER = "tinker://run-123/sampler_weights/final"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "proj" / ".machine").mkdir(parents=True)
    (tmp_path / "home").mkdir()
    return tmp_path / "proj"


def use(project: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return machine(project, "use", *argv, HOME=str(project.parent / "home"), **env)


def test_pi_models_json_is_merged_and_the_default_set_only_when_unset(project: Path) -> None:
    agent_dir = project.parent / "home" / ".pi" / "agent"
    agent_dir.mkdir(parents=True)
    (agent_dir / "models.json").write_text(json.dumps({"providers": {"other": {"baseUrl": "http://x"}}}))
    done = use(project, "base", "--agent", "pi", "--port", "9123", "--write")
    assert done.returncode == 0, done.stderr
    assert (
        '"baseUrl": "http://127.0.0.1:9123/v1"' in done.stdout
        and "machine serve base --port 9123" in done.stdout
    )
    models = json.loads((agent_dir / "models.json").read_text())
    assert models["providers"]["other"] == {"baseUrl": "http://x"}  # kept
    machine_provider = models["providers"]["machine"]
    assert (
        machine_provider["api"] == "openai-completions" and machine_provider["models"][0]["id"] == "machine"
    )
    assert machine_provider["models"][0]["contextWindow"] == 8192
    settings = json.loads((agent_dir / "settings.json").read_text())
    assert settings["defaultProvider"] == "machine" and settings["defaultModel"] == "machine"
    (agent_dir / "settings.json").write_text(json.dumps({"defaultProvider": "mine", "theme": "dark"}))
    done = use(project, "base", "--agent", "pi", "--write")
    assert "pi --provider machine --model machine" in done.stdout
    assert json.loads((agent_dir / "settings.json").read_text()) == {
        "defaultProvider": "mine",
        "theme": "dark",
    }


def test_codex_profile_file_leaves_config_toml_alone_and_warns_about_context(project: Path) -> None:
    codex = project.parent / "home" / ".codex"
    codex.mkdir(parents=True)
    original = '# my settings\nmodel = "gpt-x"\n\n[model_providers.other]\nbase_url = "http://y"\n'
    (codex / "config.toml").write_text(original)
    done = use(project, "base", "--agent", "codex", "--write")
    assert done.returncode == 0, done.stderr
    assert "context-length error" in done.stderr and "6,600 tokens" in done.stderr
    assert (codex / "config.toml").read_text() == original  # nothing of the user's is rewritten
    profile = tomllib.loads((codex / "machine.config.toml").read_text())
    assert profile["model"] == "machine" and profile["model_provider"] == "machine"
    assert profile["model_context_window"] == 8192
    provider = profile["model_providers"]["machine"]
    assert provider["wire_api"] == "responses" and provider["base_url"] == "http://127.0.0.1:8765/v1"
    assert "codex --profile machine" in done.stdout
    done = use(project, "base", "--agent", "codex", "--write")  # idempotent
    assert tomllib.loads((codex / "machine.config.toml").read_text()) == profile


def test_codex_legacy_profile_written_before_is_moved_out_of_config_toml(project: Path) -> None:
    codex = project.parent / "home" / ".codex"
    codex.mkdir(parents=True)
    (codex / "config.toml").write_text(
        '# mine\nprofile = "machine"\n\n[profiles.machine]\nmodel = "machine"\n\n[profiles.work]\nmodel = "w"\n'
    )
    done = use(project, "base", "--agent", "codex", "--write")
    assert done.returncode == 0, done.stderr
    config = tomllib.loads((codex / "config.toml").read_text())
    assert "profile" not in config and config["profiles"] == {"work": {"model": "w"}}
    assert (codex / "config.toml").read_text().startswith("# mine\n")


def test_claude_settings_env_is_merged_in_the_project(project: Path) -> None:
    settings = project / ".claude" / "settings.local.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps({"permissions": {"allow": ["Bash(ls)"]}, "env": {"FOO": "1"}}))
    done = use(project, "base", "--agent", "claude", "--port", "9000", "--write")
    assert done.returncode == 0 and "context-length error" in done.stderr
    data = json.loads(settings.read_text())
    assert data["permissions"] == {"allow": ["Bash(ls)"]}
    assert data["env"]["FOO"] == "1" and data["env"]["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9000"
    assert data["env"]["ANTHROPIC_MODEL"] == "machine"


def test_opencode_json_provider_in_the_project(project: Path) -> None:
    (project / "opencode.json").write_text(json.dumps({"theme": "x", "compaction": {"prune": True}}))
    done = use(project, "base", "--agent", "opencode", "--write")
    assert done.returncode == 0, done.stderr
    assert "7,700 tokens" in done.stderr  # OpenCode's prompt and an answer leave almost none of 8,192
    data = json.loads((project / "opencode.json").read_text())
    assert data["theme"] == "x" and data["compaction"] == {"prune": True, "auto": False}
    assert data["provider"]["machine"]["options"]["baseURL"] == "http://127.0.0.1:8765/v1"
    assert data["model"] == "machine/machine"


def test_tinker_checkpoints_point_at_tinker_and_never_print_the_key(project: Path) -> None:
    secret = "tml-this-must-not-appear"
    done = use(project, TINKER, "--agent", "pi", "--write", TINKER_API_KEY=secret)
    assert done.returncode == 0, done.stderr
    models = json.loads((project.parent / "home" / ".pi" / "agent" / "models.json").read_text())
    provider = models["providers"]["machine"]
    assert provider["baseUrl"].endswith("/oai/api/v1") and provider["models"][0]["id"] == TINKER
    assert provider["apiKey"] == "TINKER_API_KEY"  # the variable's name, resolved by Pi
    done_claude = use(project, TINKER, "--agent", "claude", "--write", TINKER_API_KEY=secret)
    assert '"$TINKER_API_KEY"' in done_claude.stdout
    opencode = use(project, TINKER, "--agent", "opencode", "--write", TINKER_API_KEY=secret)
    written = "".join(
        p.read_text() for p in [project / "opencode.json", project / ".claude" / "settings.local.json"]
    )
    for text in (done.stdout, done.stderr, done_claude.stdout, opencode.stdout, written):
        assert secret not in text
    codex = use(project, TINKER, "--agent", "codex")
    assert codex.returncode == 2 and "Responses API" in codex.stderr


def test_use_errors(project: Path) -> None:
    done = use(project, "latest", "--agent", "pi")
    assert done.returncode == 2 and "no training run with a checkpoint" in done.stderr
    (project.parent / "home" / ".pi" / "agent").mkdir(parents=True)
    (project.parent / "home" / ".pi" / "agent" / "models.json").write_text("{broken")
    done = use(project, "base", "--agent", "pi", "--write")
    assert done.returncode == 2 and "not valid JSON" in done.stderr


def test_the_serve_cli_module_imports_nothing_heavy() -> None:
    code = (
        "import sys, machine_lsp.cli.main as m; m.build_parser(); "
        "heavy = {'torch', 'transformers', 'peft', 'openai', 'anthropic', 'aiohttp', 'tinker_cookbook'} & set(sys.modules); "
        "print(sorted(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr
