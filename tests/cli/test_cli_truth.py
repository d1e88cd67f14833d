"""The CLI says only what is true (issue 14): no emoji in paths and notes, tables that fit 80 columns, no run
directory for validation or a refused pre-flight, `machine jobs prune`'s keep rule, spinners and no stale bars,
`train run` without machine.toml asks, `train validate --fix`, the validator's wording for tagging errors."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.text import Text

from machine_lsp.cli.main import main
from machine_lsp.core import runs

REPO = Path(__file__).resolve().parents[2]


def _row(q: str, a: str) -> dict:
    return {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}


@pytest.fixture
def proj(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / ".machine").mkdir()
    monkeypatch.chdir(root)
    monkeypatch.delenv("MACHINE_HOME", raising=False)
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no stored Tinker login
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    monkeypatch.setenv("COLUMNS", "80")
    return root


def _cli(cwd: Path, *argv: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "MACHINE_TORCH_THREADS": "1", "COLUMNS": "80", **env}
    full_env.pop("MACHINE_HOME", None)
    return subprocess.run(
        [sys.executable, "-m", "machine_lsp.cli.main", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        stdin=subprocess.DEVNULL,
    )


def _table_cells(out: str) -> list[list[str]]:
    """The body cells of a heavy-box rich table, stripped."""
    return [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines() if line.startswith("│")]


def _column_widths(out: str) -> list[int]:
    top = next(line for line in out.splitlines() if line.startswith("┏"))
    return [len(part) - 2 for part in top.strip("┏┓").split("┳")]


# ------------------------------------------------------------------------------------------------ no emoji


def test_paths_and_notes_are_printed_as_typed(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["good", "--from", "x.jsonl:abc"]) == 2
    err = capsys.readouterr().err
    assert "x.jsonl:abc" in err and "🔤" not in err
    (proj / "chat.jsonl").write_text(json.dumps(_row("hi :smile:", "hello :wave:")) + "\n")
    assert main(["good", "works :thumbs_up: :abc:", "--from", "chat.jsonl:1"]) == 0
    capsys.readouterr()
    assert main(["tagged"]) == 0
    out = capsys.readouterr().out
    assert "hello :wave:" in out and "👍" not in out and "👋" not in out


# ------------------------------------------------------------------------------------------ tables at 80 cols


def test_tagged_table_fits_80_columns_with_readable_cells(
    proj: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long_q = "Please explain in detail why the sky is blue and what that means for sunsets " * 3
    long_a = "Because of Rayleigh scattering, short wavelengths scatter much more strongly " * 4
    (proj / "a-rather-long-file-name-for-chat-logs.jsonl").write_text(json.dumps(_row(long_q, long_a)) + "\n")
    src = "a-rather-long-file-name-for-chat-logs.jsonl:1"
    assert main(["good", "a long note that explains what was right about it", "--from", src]) == 0
    assert main(["bad", "--from", src]) == 0
    capsys.readouterr()
    assert main(["tagged"]) == 0
    out = capsys.readouterr().out
    assert max(Text(line).cell_len for line in out.splitlines() if line[:1] in "┏┃┡│└") <= 80
    cells = _table_cells(out)
    assert len(cells) == 2 and all(len(row) == 6 for row in cells)
    assert min(_column_widths(out)) >= 6, out  # no column squeezed to 1-2 characters
    assert cells[0][1] == "good" and cells[1][1] == "bad" and len(cells[0][0]) == 16  # the whole id
    assert cells[0][2].startswith("Please") and cells[0][2].endswith("…")  # cut with an ellipsis


def _manifest(
    runs_dir: Path, run_id: str, status: str, *, job: str = "train-run", days_old: float = 0, **fields: object
) -> runs.RunManifest:
    stamp = (dt.datetime.now(dt.UTC) - dt.timedelta(days=days_old)).isoformat(timespec="seconds")
    manifest = runs.RunManifest(
        id=run_id,
        job=job,
        status=status,  # type: ignore[arg-type]
        created_at=stamp,
        updated_at=stamp,
        cwd=str(runs_dir.parents[1]),
        pid=fields.pop("pid", 999_999_999),  # type: ignore[arg-type]
        pid_start=fields.pop("pid_start", None),  # type: ignore[arg-type]
        **fields,  # type: ignore[arg-type]
    )
    runs.materialize_run(runs_dir / run_id, manifest)
    return manifest


def _checkpoint(run_id: str, step: int) -> runs.CheckpointRecord:
    return runs.CheckpointRecord(
        name=f"step-{step}", address=f"local://{run_id}/step-{step}", step=step, created_at=runs.now_iso()
    )


def test_jobs_table_fits_80_columns(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs_dir = proj / ".machine" / "runs"
    _manifest(
        runs_dir,
        "20260101-000000-eval-checkpoint-aaaa",
        "failed",
        job="eval-checkpoint",
        error="the eval set /a/very/long/path/to/some/eval/file/that/goes/on/and/on.jsonl has no rows at all",
    )
    _manifest(runs_dir, "20260101-000001-train-run-bbbb", "done", engine="local", steps_done=120)
    assert main(["jobs"]) == 0
    out = capsys.readouterr().out
    assert max(Text(line).cell_len for line in out.splitlines() if line[:1] in "┏┃┡│└") <= 80
    cells = _table_cells(out)
    assert len(cells) == 2 and min(_column_widths(out)) >= 5, out
    assert cells[1][-1].startswith("the eval set") and cells[1][-1].endswith("…")  # newest first


# ---------------------------------------------------------------------------------------------- run dirs


def test_validation_and_refused_preflights_create_no_run(proj: Path) -> None:
    (proj / "train.jsonl").write_text(json.dumps(_row("What is 2+2?", "answer: 4")) + "\n")
    (proj / "empty.jsonl").write_text("")
    assert _cli(proj, "train", "validate", "train.jsonl").returncode == 0
    # Tinker without a key: refused by the engine's pre-flight
    done = _cli(proj, "train", "run", "--engine", "tinker", "--data", "train.jsonl", "--yes")
    assert done.returncode == 1 and "tinker" in (done.stdout + done.stderr).lower()
    # no data: the store has no good rows
    done = _cli(proj, "train", "smoke", "--engine", "local", "--yes")
    assert done.returncode == 1 and "no good rows" in done.stderr
    # 0 rows
    done = _cli(proj, "train", "smoke", "--engine", "local", "--data", "empty.jsonl", "--yes")
    assert done.returncode != 0
    # no eval set
    done = _cli(proj, "train", "eval", "baseline", "--engine", "local")
    assert done.returncode == 1 and "no eval data" in done.stderr, done.stderr
    runs_dir = proj / ".machine" / "runs"
    assert not runs_dir.exists() or list(runs_dir.iterdir()) == []


# ------------------------------------------------------------------------------------------------- prune


def test_prune_removes_failed_and_old_runs_but_keeps_named_checkpoints(
    proj: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs_dir = proj / ".machine" / "runs"
    base = "20260101-0000"
    # a done training run that a later run resumed from: kept (even when old)
    a = f"{base}00-train-run-aaaa"
    _manifest(
        runs_dir,
        a,
        "done",
        days_old=40,
        checkpoints=[_checkpoint(a, 10)],
        last_checkpoint=f"local://{a}/step-10",
    )
    b = f"{base}01-train-run-bbbb"
    _manifest(runs_dir, b, "failed", days_old=39, resumed_from=f"local://{a}/step-10", error="boom")
    # a recent run that resumed from run a by its id prefix (`--resume 20260101-000000`): keeps a after b goes
    h = f"{base}07-train-run-hhhh"
    _manifest(runs_dir, h, "done", days_old=1, args={"resume": a[:15]})
    # a failed run nothing names: removed by --failed
    c = f"{base}02-train-run-cccc"
    _manifest(runs_dir, c, "failed", checkpoints=[_checkpoint(c, 2)], last_checkpoint=f"local://{c}/step-2")
    # a cancelled run an eval result names: kept
    d = f"{base}03-train-run-dddd"
    _manifest(
        runs_dir,
        d,
        "cancelled",
        days_old=30,
        checkpoints=[_checkpoint(d, 4)],
        last_checkpoint=f"local://{d}/step-4",
    )
    (proj / "eval_results").mkdir()
    (proj / "eval_results" / "step-4.json").write_text(json.dumps({"checkpoint": f"local://{d}/step-4"}))
    # an old done eval run: removed by age
    e = f"{base}04-eval-baseline-eeee"
    _manifest(runs_dir, e, "done", job="eval-baseline", days_old=20)
    # a running job (its process is alive, its start time matches): never removed
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        f = f"{base}05-train-run-ffff"
        _manifest(
            runs_dir,
            f,
            "running",
            days_old=50,
            pid=sleeper.pid,
            pid_start=runs.process_start_ticks(sleeper.pid),
        )
        # the newest training run with a checkpoint: what `latest` names, kept
        g = f"{base}06-train-run-gggg"
        _manifest(
            runs_dir,
            g,
            "done",
            days_old=25,
            checkpoints=[_checkpoint(g, 8)],
            last_checkpoint=f"local://{g}/step-8",
        )

        assert main(["jobs", "prune"]) == 2  # neither --failed nor --older-than
        capsys.readouterr()
        assert main(["jobs", "prune", "--failed", "--older-than", "7", "--dry-run", "--json"]) == 0
        plan = json.loads(capsys.readouterr().out)
        actions = {d["run_id"]: d["action"] for d in plan["decisions"]}
        assert actions == {a: "keep", b: "remove", c: "remove", d: "keep", e: "remove", g: "keep"}
        assert h not in actions  # done and recent: not selected
        assert f not in actions  # a running job is never even a candidate, whatever its age
        assert plan["removed"] == [] and len(list(runs_dir.iterdir())) == 8  # a dry run removes nothing

        assert main(["jobs", "prune", "--failed"]) == 0
        out = capsys.readouterr().out
        assert "removed" in out
        left = {p.name for p in runs_dir.iterdir()}
        assert left == {a, d, e, f, g, h}  # b and c were failed; e is only old
        assert main(["jobs", "prune", "--older-than", "7"]) == 0
        assert {p.name for p in runs_dir.iterdir()} == {a, d, f, g, h}
        reasons = {d["run_id"]: d["reason"] for d in plan["decisions"]}
        assert (
            f"run {b} uses its checkpoint local://{a}/step-10" == reasons[a]
            or f"run {h} resumed" in reasons[a]
        )
        assert "eval result" in reasons[d] and "latest" in reasons[g]
    finally:
        sleeper.kill()
        sleeper.wait()


# ------------------------------------------------------------------------------------------ validate --fix

FIXABLE = (
    b"\xef\xbb\xbf"  # a byte-order mark
    + b'{"messages":[{"role":"User","content":"hi"},{"role":"assistant","content":"yo"},]}\n'  # role case, comma
    + b"\n"  # a blank line
    + b'{"messages":[{"role":"user","content":"a"},{"role":"Assistant","content":"b"}]} '  # two rows on a line
    + b'{"messages":[{"role":"user","content":"c"},{"role":"assistant","content":"d"}]}\n'
    + b'{"messages":[{"role":"user","content":"e"},{"role":"assistant","content":"f"}]}\n'
)


def test_validate_shows_the_fix_of_each_finding(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (proj / "data.jsonl").write_bytes(FIXABLE)
    assert main(["train", "validate", "data.jsonl"]) == 1
    out = capsys.readouterr().out
    assert "bom" in out and "(fix: Remove the byte-order mark)" in out
    assert "(fix: Remove the trailing comma)" in out and "(fix: Split into one row per line)" in out
    assert "can be fixed with --fix" in out
    assert main(["train", "validate", "data.jsonl", "--json"]) == 1
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert {f["fix"]["title"] for f in findings if f["fix"]} >= {
        "Remove the blank line",
        "Remove the byte-order mark",
    }


def test_validate_fix_applies_every_mechanical_fix_with_a_backup(
    proj: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = proj / "data.jsonl"
    data.write_bytes(FIXABLE)
    data.chmod(0o640)
    assert main(["train", "validate", "data.jsonl", "--fix"]) == 0
    out = capsys.readouterr().out
    assert (
        "fixed 6 findings" in out and 'Change role to "user"' in out and 'Change role to "assistant"' in out
    )
    assert (proj / "data.jsonl.bak").read_bytes() == FIXABLE  # the backup is the original
    assert oct(data.stat().st_mode & 0o777) == oct(0o640)  # the mode is kept
    fixed = data.read_bytes()
    assert fixed.count(b"\n") == 4 and not fixed.startswith(b"\xef")
    assert [json.loads(line)["messages"][1]["role"] for line in fixed.splitlines()] == ["assistant"] * 4
    assert main(["train", "validate", "data.jsonl"]) == 0  # validates clean
    capsys.readouterr()
    assert main(["train", "validate", "data.jsonl", "--fix", "--no-backup"]) == 0
    assert "nothing to fix" in capsys.readouterr().out
    assert main(["train", "validate", "--fix"]) == 2  # the store is not a file to fix


def test_overlapping_fixes_are_skipped_and_said() -> None:
    from machine_lsp.core.fixes import apply_fixes
    from machine_lsp.core.validate import Finding, Fix, TextEdit

    def finding(col: int, end: int, new: str) -> Finding:
        edit = TextEdit(1, col, 1, end, new)
        return Finding(1, col, 1, end, "error", "x", "m", Fix(f"put {new}", [edit]))

    text, outcome = apply_fixes(b"abcdef\n", [finding(5, 6, "E"), finding(2, 4, "BC"), finding(3, 5, "zz")])
    assert text == b"aBCdEf\n"
    assert [f.fix.title for f in outcome.skipped if f.fix] == ["put zz"]  # overlaps "BC": skipped, reported


# ------------------------------------------------------------------------------- train run without machine.toml


def test_train_run_without_machine_toml_says_its_defaults_and_asks(proj: Path) -> None:
    import pty

    (proj / "train.jsonl").write_text(
        "".join(json.dumps(_row(f"{i}+1?", f"answer: {i + 1}")) + "\n" for i in range(5))
    )
    done = _cli(proj, "train", "run", "--data", "train.jsonl")  # stdin is not a terminal: refused, told how
    assert done.returncode == 2
    err = " ".join(done.stderr.split())
    assert (
        "no machine.toml" in err and "engine local" in err and "5 rows from" in err and "learning rate" in err
    )
    assert "--yes" in err and "machine train sft" in err
    # with a terminal: it asks, and anything but y starts nothing
    master, slave = pty.openpty()
    try:
        env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
        env.pop("MACHINE_HOME", None)
        proc = subprocess.Popen(
            [sys.executable, "-m", "machine_lsp.cli.main", "train", "run", "--data", "train.jsonl"],
            cwd=proj,
            stdin=slave,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        os.write(master, b"n\n")
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(master)
        os.close(slave)
    assert (
        proc.returncode == 2 and "Train with these? [y/N]" in out and "cancelled: nothing was started" in err
    )
    assert not (proj / ".machine" / "runs").exists()
    # with machine.toml it does not ask
    assert main(["train", "sft", "train.jsonl", "--steps", "1"]) == 0
    done = _cli(proj, "train", "run", "--engine", "tinker")
    assert "no machine.toml" not in done.stderr and "costs money" in done.stderr


# --------------------------------------------------------------------------- tagging errors and exit codes


def test_tagging_a_bad_row_says_what_the_validator_says(
    proj: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from machine_lsp.core.validate import validate_path

    row = {"messages": [{"role": "user", "content": "hi"}, {"role": "Assistant", "content": "yo"}]}
    (proj / "chat.jsonl").write_text(json.dumps(row) + "\n")
    assert main(["good", "--from", "chat.jsonl:1"]) == 2  # unreadable input: 2, as for every verb
    err = capsys.readouterr().err.strip()
    finding = validate_path(proj / "chat.jsonl").findings[0]
    assert finding.code == "role-unknown" and 'did you mean "assistant"?' in finding.message
    assert err == f"machine: {proj / 'chat.jsonl'}:1:{finding.column}: {finding.message} (role-unknown)"


def test_exit_codes_follow_the_one_rule(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (proj / "ok.jsonl").write_text(json.dumps(_row("q", "a")) + "\n")
    assert main(["train", "validate", "ok.jsonl"]) == 0
    assert main(["train", "validate", "missing.jsonl"]) == 2
    assert main(["jobs", "cancel", "no-such-run"]) == 2
    assert main(["jobs", "prune", "--older-than", "-1"]) == 2
    # a store that cannot be read: 3, for the store's good rows as for the tagging verbs and the job lists
    (proj / ".machine" / "tagged.jsonl").mkdir()
    capsys.readouterr()
    assert main(["train", "validate"]) == 3
    assert "store" in capsys.readouterr().err
    assert main(["tagged"]) == 3
    assert main(["good", "--from", "ok.jsonl:1"]) == 3


# ------------------------------------------------------------------------------------ spinner, no stale bars


def test_a_job_shows_a_spinner_from_its_first_second(proj: Path) -> None:
    (proj / "train.jsonl").write_text(json.dumps(_row("What is 2+2?", "answer: 4")) + "\n")
    # a real job child through the CLI, on a terminal as rich sees one (FORCE_COLOR, TTY_INTERACTIVE)
    done = _cli(
        proj,
        "train",
        "run",
        "--yes",
        "--engine",
        "tinker",
        "--data",
        "train.jsonl",
        FORCE_COLOR="1",
        TTY_INTERACTIVE="1",
    )
    assert done.returncode == 1
    assert "starting train run…" in done.stdout  # shown before the child's first event
    assert "train-run: starting (imports, data, model)…" in done.stdout


def test_no_bar_is_left_at_zero_when_a_job_fails(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from machine_lsp.cli.job_render import run_job

    # the validate job counts 3 lines (a 0/3 bar), then finds the file is binary and fails
    (proj / "bin.jsonl").write_bytes(b'{"messages":[]}\n\x00\x00bin\n{"a":1}\n')
    assert run_job("validate", {"path": "bin.jsonl"}) == 1
    captured = capsys.readouterr()
    assert "0/3" not in captured.out and "looks like a binary file" in captured.err
    assert "run " not in captured.out  # validation keeps no run, so none is named
