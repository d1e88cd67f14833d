"""Write the scaffold files into a project directory, refusing to overwrite without `force`.

Files are written by the safe-write rule (core/safe_files.py): a link, FIFO or device where a scaffold file or
machine.toml should be is refused (never written through), and a planted temporary name is never used.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from machine_lsp.core.safe_files import NotRegularFile, write_file_safely
from machine_lsp.scaffold.config import CONFIG_FILE, MachineConfig, render_toml

TRAIN_SCRIPT = "train_sft.py"
EVAL_SCRIPT = "eval.py"


class ScaffoldExists(FileExistsError):
    """A scaffold file is already there and `force` was not given."""


def template(name: str, command: str) -> str:
    text = resources.files("machine_lsp.scaffold").joinpath("templates", name).read_text(encoding="utf-8")
    return text.replace("{{COMMAND}}", command)


def _check(paths: list[Path], force: bool) -> None:
    existing = [p for p in paths if p.exists()]
    if existing and not force:
        names = ", ".join(p.name for p in existing)
        raise ScaffoldExists(
            f"{names} already exist{'s' if len(existing) == 1 else ''} in {existing[0].parent}; "
            "pass --force to overwrite"
        )


def _write(path: Path, text: str) -> None:
    try:
        write_file_safely(path, text.encode("utf-8"), root=path.parent)
    except NotRegularFile as exc:
        raise ScaffoldExists(f"{exc}; machine never writes through links or special files") from None


def write_default_config(project: Path) -> Path | None:
    """machine.toml with the defaults, when the project has none (nothing at all there: not even a link)."""
    path = project / CONFIG_FILE
    if path.is_symlink() or path.exists():
        return None
    _write(path, render_toml(MachineConfig()))
    return path


def write_train_scaffold(
    project: Path, config: MachineConfig, *, command: str, force: bool = False
) -> list[Path]:
    script, cfg = project / TRAIN_SCRIPT, project / CONFIG_FILE
    _check([script, cfg], force)
    _write(cfg, render_toml(config))
    _write(script, template(f"train_sft_{config.train.engine}.py.tmpl", command))
    return [script, cfg]


def write_eval_scaffold(project: Path, *, command: str, force: bool = False) -> list[Path]:
    script = project / EVAL_SCRIPT
    _check([script], force)
    _write(script, template("eval.py.tmpl", command))
    return [script]
