"""`machine use --write` by the safe-write rule: no write through a planted link, modes kept, FIFOs and wrong-shaped
configs refused with one line, impossible ports refused, both spellings of Claude Code, compaction off on the
small served context."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from serve_helpers import machine

from machine_lsp.serve import agents


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "proj" / ".machine").mkdir(parents=True)
    (tmp_path / "home").mkdir()
    return tmp_path / "proj"


def use(project: Path, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return machine(project, "use", "base", *argv, timeout=timeout, HOME=str(project.parent / "home"))


def one_line_refusal(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("agent", "temp_name"),
    [("opencode", ".opencode.json.machine-tmp"), ("claude", ".claude/.settings.local.json.machine-tmp")],
)
def test_a_planted_temp_name_is_never_written_through(project: Path, agent: str, temp_name: str) -> None:
    victim = project.parent / "victim.txt"
    victim.write_text("precious\n")
    planted = project / temp_name
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.symlink_to(victim)
    done = use(project, "--agent", agent, "--write")
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "precious\n"
    assert planted.is_symlink()  # the repository's file is left as it is
    written = project / ("opencode.json" if agent == "opencode" else ".claude/settings.local.json")
    assert '"machine"' in written.read_text()


def test_a_linked_config_or_config_folder_is_refused(project: Path) -> None:
    outside = project.parent / "outside"
    outside.mkdir()
    (outside / "opencode.json").write_text("{}")
    (project / "opencode.json").symlink_to(outside / "opencode.json")
    done = use(project, "--agent", "opencode", "--write")
    one_line_refusal(done, "opencode.json", "symbolic link")
    assert (outside / "opencode.json").read_text() == "{}"
    (project / ".claude").symlink_to(outside)
    done = use(project, "--agent", "claude", "--write")
    one_line_refusal(done, ".claude", "symbolic link")
    assert sorted(p.name for p in outside.iterdir()) == ["opencode.json"]


def test_an_existing_config_keeps_its_mode(project: Path) -> None:
    agent_dir = project.parent / "home" / ".pi" / "agent"
    agent_dir.mkdir(parents=True)
    models = agent_dir / "models.json"
    models.write_text(json.dumps({"providers": {"paid": {"apiKey": "sk-other"}}}))
    models.chmod(0o600)
    done = use(project, "--agent", "pi", "--write")
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(models.stat().st_mode) == 0o600
    assert json.loads(models.read_text())["providers"]["paid"] == {"apiKey": "sk-other"}


def test_a_fifo_as_the_agent_config_is_refused_not_hung_on(project: Path) -> None:
    os.mkfifo(project / "opencode.json")
    done = use(project, "--agent", "opencode", "--write", timeout=30)
    one_line_refusal(done, "opencode.json", "FIFO")
    assert stat.S_ISFIFO(os.lstat(project / "opencode.json").st_mode)


@pytest.mark.parametrize(
    ("agent", "relative", "content", "words"),
    [
        ("pi", "home/.pi/agent/models.json", "[1, 2]", ("models.json", "an array")),
        ("pi", "home/.pi/agent/models.json", '"text"', ("models.json", "a string")),
        ("pi", "home/.pi/agent/models.json", '{"providers": []}', ("'providers' is an array",)),
        ("pi", "home/.pi/agent/settings.json", "[]", ("settings.json", "an array")),
        ("opencode", "proj/opencode.json", '{"provider": "x"}', ("'provider' is a string",)),
        ("claude", "proj/.claude/settings.local.json", '{"env": [1]}', ("'env' is an array",)),
        (
            "codex",
            "home/.codex/machine.config.toml",
            "model_providers = 3\n",
            ("'model_providers' is not a table",),
        ),
        ("codex", "home/.codex/config.toml", "profiles = 3\n", None),
        ("codex", "home/.codex/config.toml", "[broken\n", None),
    ],
)
def test_wrong_shaped_configs_get_one_line(
    project: Path, agent: str, relative: str, content: str, words: tuple[str, ...] | None
) -> None:
    path = project.parent / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    done = use(project, "--agent", agent, "--write")
    if words is None:  # not ours to fix, and nothing of ours in it: left alone
        assert done.returncode == 0 and path.read_text() == content, done.stderr
        return
    one_line_refusal(done, *words)
    assert path.read_text() == content


@pytest.mark.parametrize("port", ["0", "99999", "-1"])
def test_impossible_ports_are_refused_and_nothing_is_written(project: Path, port: str) -> None:
    done = use(project, "--agent", "opencode", "--port", port, "--write")
    one_line_refusal(done, f"port {port}", "1-65535")
    assert not (project / "opencode.json").exists()


def test_claude_code_is_the_same_agent_as_claude(project: Path) -> None:
    done = use(project, "--agent", "claude-code", "--write")
    assert done.returncode == 0, done.stderr
    assert json.loads((project / ".claude" / "settings.local.json").read_text())["env"]["ANTHROPIC_MODEL"]
    listed = machine(project, "sessions", "--harness", "claude", "--json", HOME=str(project.parent / "home"))
    assert listed.returncode == 0 and json.loads(listed.stdout) == [], listed.stderr


def test_pi_compaction_is_turned_off_in_the_project_on_the_small_context(project: Path) -> None:
    settings = project / ".pi" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps({"theme": "dark", "compaction": {"keepRecentTokens": 100}}))
    done = use(project, "--agent", "pi", "--write")
    assert done.returncode == 0, done.stderr
    assert json.loads(settings.read_text()) == {
        "theme": "dark",
        "compaction": {"keepRecentTokens": 100, "enabled": False},
    }
    settings.write_text(
        json.dumps({"compaction": {"enabled": True}})
    )  # the user's choice stays, with a warning
    done = use(project, "--agent", "pi", "--write")
    assert done.returncode == 0 and "compact after every answer" in done.stderr
    assert json.loads(settings.read_text()) == {"compaction": {"enabled": True}}


def test_the_context_warning_counts_the_prompt_and_the_answer() -> None:
    local = agents.endpoint_for("base", "local", port=8765, keyed=False)
    tinker = agents.endpoint_for("tinker://r/sampler_weights/x", "tinker", port=8765, keyed=False)
    assert agents._context_warning("pi", local) == []  # 1,550 + 1,024 leaves more than half of 8,192
    (codex,) = agents._context_warning("codex", local)
    assert "leaving about 568" in codex
    (opencode,) = agents._context_warning("opencode", local)
    assert "does not fit" in opencode and "context-length error" in opencode
    assert agents._context_warning("claude", tinker) == []  # Tinker's context is not known here


def test_codex_leaves_a_linked_config_toml_alone(project: Path) -> None:
    dotfiles = project.parent / "dotfiles" / "codex.toml"
    dotfiles.parent.mkdir()
    dotfiles.write_text('model = "gpt-x"\n')
    codex = project.parent / "home" / ".codex"
    codex.mkdir(parents=True)
    (codex / "config.toml").symlink_to(dotfiles)  # the user's own dotfiles link: read by Codex, never by us
    done = use(project, "--agent", "codex", "--write")
    assert done.returncode == 0, done.stderr
    assert (codex / "config.toml").is_symlink() and dotfiles.read_text() == 'model = "gpt-x"\n'
    assert "left" in done.stdout and (codex / "machine.config.toml").is_file()
