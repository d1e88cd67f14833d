"""The verb registry: every verb of every face in one table — its CLI words, its language-server command, the job it
runs, how the server shows and guards it, and its entries in the VS Code command palette.

The CLI takes its verb names and help from here (`cli/verb_parsers.py`; each verb's module adds its arguments), the
language server registers exactly these command ids and builds its job commands from the `job`/`progress`/`asks`
columns (`lsp/features/job_commands.py`), and the extension's palette list — `contributes.commands`, the command
palette's `when` clauses and the commands that run in Restricted Mode — is generated from it
(`editors/vscode/scripts/generate-palette.mjs`, checked by `npm test`). Messages that point at another verb name it
by its palette title (:func:`palette_title`), never by its command id.

A new verb: one line below (a `Verb`; `_shown` for one with palette entries, `_job` for a job with progress) and
its handler (CONTRIBUTING.md walks through it). Standard library only: the language server and the CLI both read it
at start.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

CATEGORY = "Machine"


@dataclass(frozen=True)
class Palette:
    """One VS Code command of a verb (a verb can have several: *Tag as Good*, *Tag with Rewrite…*)."""

    command: str  # the extension's command id (`machineLsp.smoke`); its handler is in editors/vscode/src
    title: str  # what the palette shows after the category: "Smoke Run"
    when: str | None = (
        None  # when the palette lists it: always (None), never ("false": a view's or a menu's), a clause
    )
    icon: str | None = None  # a codicon, for the views' title and item buttons
    untrusted: bool = (
        False  # also runs in Restricted Mode (an untrusted folder): it starts no job, writes nothing
    )
    category: str = CATEGORY


@dataclass(frozen=True)
class Verb:
    help: str  # one line: the CLI's help for it, and what it does
    cli: str | None = None  # the CLI words after `machine` ("train run"); a group's words name its parser
    command: str | None = None  # the language server's workspace/executeCommand id ("machine.train.run")
    job: str | None = None  # the job verb it runs in a child process (jobs/verbs.py: "train-run"); the CLI
    # handler reads it as `args.job_verb` where it runs one (some run in-process: `train validate`, `serve`)
    progress: str | None = None  # the server's work-done progress title for the job
    asks: bool = False  # the server asks before running it (long or paid), stating the plan
    palette: tuple[Palette, ...] = ()


def _job(
    cli: str | None, command: str, job: str, progress: str, asks: bool, help: str, *palette: Palette
) -> Verb:
    return Verb(help, cli, command, job, progress, asks, palette)


def _shown(
    help: str, cli: str | None, command: str | None, *palette: Palette, job: str | None = None
) -> Verb:
    """A verb with command-palette entries (and no progress or question of its own)."""
    return Verb(help, cli, command, job, palette=palette)


VERBS: tuple[Verb, ...] = (
    # tagging and the store (cli/tag_commands.py, cli/tag_edit_commands.py; lsp/features/tagging.py, tag_edits.py)
    _shown(
        "tag an assistant turn as good (optionally with a rewrite)",
        "good",
        "machine.tag",
        Palette("machineLsp.tagGood", "Tag as Good"),
        Palette("machineLsp.tagRewrite", "Tag with Rewrite…"),
        Palette("machineLsp.tagSelection", "Tag Selection…", when="editorHasSelection"),
        Palette("machineLsp.tagLastGood", "Tag Last Agent Turn as Good…"),
        Palette("machineLsp.sessions.tagGood", "Tag Turn as Good", when="false", icon="$(thumbsup)"),
    ),
    _shown(
        "tag an assistant turn as bad",
        "bad",
        "machine.tag",
        Palette("machineLsp.tagBad", "Tag as Bad"),
        Palette("machineLsp.tagLastBad", "Tag Last Agent Turn as Bad…"),
        Palette("machineLsp.sessions.tagBad", "Tag Turn as Bad", when="false", icon="$(thumbsdown)"),
    ),
    _shown(
        "list the tagged turns",
        "tagged",
        "machine.tagged",
        Palette("machineLsp.showTagged", "Show Tagged Rows"),
    ),
    _shown(
        "where the store is and what it holds",
        "data",
        "machine.data",
        Palette("machineLsp.showDataPath", "Show Data Path"),
    ),
    Verb("export tagged turns as training data, or a checkpoint's adapter", "export"),
    Verb("take a tag back (the store keeps the history)", "untag", "machine.untag"),
    Verb("change a tag's note, rewrite or verdict (the history is kept)", "retag", "machine.retag"),
    # training (cli/validate_command.py, cli/train_commands.py; lsp/features/job_commands.py, scaffold.py)
    Verb("validate data, scaffold, smoke-test, train and evaluate", "train"),
    _job(
        "train validate",
        "machine.validate",
        "validate",
        "Validate",  # the server adds the file's name
        False,
        "check chat JSONL (shape, duplicates, train/eval leakage; tokens with --model)",
        Palette("machineLsp.validate", "Validate Current File"),
    ),
    _shown(
        "scaffold train_sft.py + machine.toml in the current directory",
        "train sft",
        "machine.train.sft",
        Palette("machineLsp.scaffold", "Scaffold SFT Script"),
    ),
    _job(
        "train smoke",
        "machine.train.smoke",
        "train-smoke",
        "Training smoke test",
        False,
        "2 real training steps on the configured engine, then one sample",
        Palette("machineLsp.smoke", "Smoke Run"),
    ),
    _job(
        "train run",
        "machine.train.run",
        "train-run",
        "Training run",
        True,
        "the configured training (sft, dpo, kto or sft+dpo) as a job: progress, checkpoints, loss.png",
        Palette("machineLsp.train", "Train"),
    ),
    _job(
        None,  # the CLI's `train run --objective dpo|kto|sft+dpo`
        "machine.train.preferences",
        "train-run",
        "Preference training run",
        True,
        "a training run with a preference objective (dpo, kto or sft+dpo)",
        Palette("machineLsp.trainPreferences", "Train with Preferences…"),
    ),
    _job(
        "retrain",
        "machine.retrain",
        "retrain",
        "Retrain and reload",
        True,
        "train on the store's good rows (scoped), gate, promote: `machine serve promoted` picks it up",
        Palette("machineLsp.retrain", "Retrain and Reload"),
    ),
    # evaluation (cli/eval_commands.py; lsp/features/job_commands.py, scaffold.py, eval_set.py)
    Verb("held-out evaluation: init, split, baseline, checkpoint, compare, probe", "train eval"),
    Verb("write eval.py (and machine.toml if missing)", "train eval init", "machine.eval.init"),
    _shown(
        "hold out tagged good rows as the eval set ([eval] data, else eval.jsonl); store runs skip them",
        "train eval split",
        "machine.eval.split",
        Palette("machineLsp.makeEvalSet", "Make Eval Set…"),
    ),
    _job(
        "train eval baseline",
        "machine.eval.baseline",
        "eval-baseline",
        "Baseline evaluation",
        True,
        "evaluate the base model -> eval_results/baseline.json",
        Palette("machineLsp.baseline", "Baseline Eval"),
    ),
    _job(
        "train eval checkpoint",
        "machine.eval.checkpoint",
        "eval-checkpoint",
        "Checkpoint evaluation",
        True,
        "evaluate a checkpoint -> eval_results/<name>.json",
        Palette("machineLsp.evalCheckpoint", "Evaluate Checkpoint…"),
    ),
    _shown(
        "compare two eval results (B against A) + chart",
        "train eval compare",
        "machine.eval.compare",
        Palette("machineLsp.compare", "Compare Results…"),
    ),
    _job(
        "train eval probe",
        "machine.eval.probe",
        "eval-probe",
        "Style-bleed probe",
        True,
        "style-bleed probe of a checkpoint (or the base model)",
        Palette("machineLsp.probe", "Style-Bleed Probe…"),
    ),
    Verb(
        "preference accuracy and mean reward margin on held-out pairs -> eval_results/pairs-<name>.json",
        "train eval pairs",
        job="eval-pairs",
    ),
    # promotion (cli/promote_commands.py)
    Verb("promote a checkpoint by hand (overrides the gate, recorded)", "train promote"),
    Verb("restore the checkpoint promoted before the current one", "train rollback"),
    Verb("which checkpoint is promoted, and the record", "train promoted"),
    # jobs (cli/jobs_commands.py; lsp/features/job_commands.py)
    Verb("list runs in .machine/runs, or cancel one", "jobs"),
    Verb("list runs with their status", "jobs list", "machine.jobs.list"),
    _shown(
        "stop a running job (SIGTERM; it records its last checkpoint)",
        "jobs cancel",
        "machine.jobs.cancel",
        Palette("machineLsp.cancelJob", "Cancel Job"),
    ),
    Verb(
        "remove failed or old runs (never a running one, nor a checkpoint another run or eval still names)",
        "jobs prune",
    ),
    # agent sessions (cli/sessions_command.py; lsp/features/sessions.py)
    _shown(
        "list this project's agent sessions (Pi, Claude Code, Codex, OpenCode, Letta Code)",
        "sessions",
        "machine.sessions",
        Palette("machineLsp.sessions.refresh", "Refresh Sessions", icon="$(refresh)"),
    ),
    Verb("one session's turns, in order", command="machine.sessions.turns"),
    # serving (cli/serve_commands.py; lsp/features/serving.py)
    _shown(
        "serve a checkpoint to agents (OpenAI / Anthropic APIs on 127.0.0.1)",
        "serve",
        "machine.serve.start",
        Palette("machineLsp.serveCheckpoint", "Serve Checkpoint…"),
        job="serve",
    ),
    _shown(
        "stop serving the checkpoint",
        None,
        "machine.serve.stop",
        Palette("machineLsp.stopServing", "Stop Serving"),
    ),
    Verb("what is served, where", command="machine.serve.status"),
    _shown(
        "print (or --write) an agent's config to use a checkpoint",
        "use",
        "machine.use",
        Palette("machineLsp.useCheckpoint", "Use Checkpoint in Agent…"),
        job="use",
    ),
    # capture (cli/capture_commands.py)
    Verb("record agents' model traffic for tagging (capture proxy)", "capture"),
    Verb(
        "a recording proxy in front of a model API (OpenAI Chat Completions / Responses, Anthropic)",
        "capture proxy",
    ),
    # the local Tinker server (cli/tinker_commands.py; lsp/features/serving.py)
    Verb("a local Tinker-API server (SkyRL tx) for --engine tinker", "tinker"),
    _shown(
        "start the local server (127.0.0.1) and record its URL in machine.toml",
        "tinker serve",
        "machine.tinker.serve",
        Palette("machineLsp.startTinkerServer", "Start Local Tinker Server"),
        job="tinker-serve",
    ),
    Verb(
        "is the local server running, where, and its last log lines",
        "tinker status",
        "machine.tinker.status",
        job="tinker-status",
    ),
    _shown(
        "stop the local server",
        "tinker stop",
        "machine.tinker.stop",
        Palette("machineLsp.stopTinkerServer", "Stop Local Tinker Server"),
        job="tinker-stop",
    ),
    # the server itself (lsp/features/server_info.py)
    Verb("the server's version, interpreter and what it has loaded", command="machine.server.info"),
    # the extension's own verbs: no CLI, no server command (their handlers are in editors/vscode/src)
    _shown(
        "the run panel: live loss, checkpoints, comparisons",
        None,
        None,
        Palette("machineLsp.openPanel", "Open Run Panel", untrusted=True),
    ),
    _shown(
        "the Tinker API key in VS Code's secret storage",
        None,
        None,
        Palette("machineLsp.setTinkerKey", "Set Tinker API Key…"),
        Palette("machineLsp.clearTinkerKey", "Clear Tinker API Key"),
    ),
    _shown(
        "a Python environment with the train extra for the server",
        None,
        None,
        Palette("machineLsp.createTrainingEnvironment", "Create Training Environment"),
    ),
    _shown(
        "the language server's process and log",
        None,
        None,
        Palette("machineLsp.restartServer", "Restart Language Server", untrusted=True),
        Palette("machineLsp.showOutput", "Show Server Log", untrusted=True),
    ),
    _shown(
        "open a session's turn in its log (the Sessions view)",
        None,
        None,
        Palette("machineLsp.sessions.openTurn", "Open Turn in Log", when="false"),
    ),
    _shown(
        "the status bar's menus",
        None,
        None,
        Palette("machineLsp.servedMenu", "Served Checkpoint Menu", when="false"),
        Palette("machineLsp.tinkerMenu", "Local Tinker Server Menu", when="false"),
    ),
)

#: Every language-server command id, once each, in registry order.
LSP_COMMANDS: tuple[str, ...] = tuple(dict.fromkeys(v.command for v in VERBS if v.command))
#: Every CLI verb's words, in registry order.
CLI_VERBS: tuple[str, ...] = tuple(v.cli for v in VERBS if v.cli)


def cli_verb(words: str) -> Verb:
    """The registry line of the CLI verb `words` ("train smoke"); KeyError when there is none."""
    for verb in VERBS:
        if verb.cli == words:
            return verb
    raise KeyError(f"no CLI verb {words!r} in core/verb_registry.py")


def lsp_verb(command: str) -> Verb:
    """The (first) registry line of the server command `command`; KeyError when there is none."""
    for verb in VERBS:
        if verb.command == command:
            return verb
    raise KeyError(f"no server command {command!r} in core/verb_registry.py")


def lsp_job(command: str) -> str:
    """The job verb the server command `command` runs; KeyError when it runs none."""
    if (job := lsp_verb(command).job) is None:
        raise KeyError(f"server command {command!r} runs no job (core/verb_registry.py)")
    return job


def palette_title(command: str) -> str:
    """How a message names the server command `command` to a person: its first palette title ("Smoke Run"), else
    its CLI words (`machine jobs list`)."""
    verb = lsp_verb(command)
    if verb.palette:
        return verb.palette[0].title
    return f"`machine {verb.cli}`" if verb.cli else command


def registry_problems(verbs: tuple[Verb, ...] = VERBS) -> list[str]:
    """What breaks the registry's rules (empty when none): one name per CLI verb and palette command, a group above
    every CLI verb (and before it), one job per server command, progress and asking only with a job."""
    problems: list[str] = []
    clis = [v.cli for v in verbs if v.cli]
    palettes = [p.command for v in verbs for p in v.palette]
    problems += [f"CLI verb {w!r} is listed twice" for w in sorted({w for w in clis if clis.count(w) > 1})]
    problems += [
        f"palette command {c!r} is listed twice"
        for c in sorted({c for c in palettes if palettes.count(c) > 1})
    ]
    for i, words in enumerate(clis):
        parent = words.rsplit(" ", 1)[0] if " " in words else None
        if parent is not None and parent not in clis[:i]:
            problems.append(f"CLI verb {words!r} has no group {parent!r} before it")
    for command in dict.fromkeys(v.command for v in verbs if v.command):
        runs = {(v.job, v.progress, v.asks) for v in verbs if v.command == command}
        if len(runs) > 1:
            problems.append(f"server command {command!r} has different jobs: {sorted(runs, key=str)}")
    for v in verbs:
        name = v.cli or v.command or v.help
        if (v.progress or v.asks) and not (v.job and v.command):
            problems.append(f"{name!r}: progress and asking are the server's, for a command that runs a job")
        if not (v.cli or v.command or v.palette):
            problems.append(f"{name!r} is in no face (no CLI words, server command or palette entry)")
    return problems


def palette_contribution() -> dict[str, list]:
    """The extension's palette list as package.json holds it (`contributes.commands`, `menus.commandPalette`), and
    the commands that run in Restricted Mode (the extension's src/generated/palette.ts)."""
    entries = [p for v in VERBS for p in v.palette]
    commands = [
        {"command": p.command, "title": p.title, "category": p.category}
        | ({"icon": p.icon} if p.icon else {})
        for p in entries
    ]
    hidden = [{"command": p.command, "when": p.when} for p in entries if p.when is not None]
    return {
        "commands": commands,
        "commandPalette": hidden,
        "untrusted": [p.command for p in entries if p.untrusted],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m machine_lsp.core.verb_registry",
        description="Write the VS Code extension's palette list (JSON) generated from the verb registry.",
    )
    parser.add_argument("--palette", action="store_true", help="the palette list, on stdout")
    args = parser.parse_args(argv)
    if not args.palette:
        parser.print_help(sys.stderr)
        return 2
    problems = registry_problems()
    if problems:
        print("\n".join(f"verb registry: {p}" for p in problems), file=sys.stderr)
        return 1
    json.dump(palette_contribution(), sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
