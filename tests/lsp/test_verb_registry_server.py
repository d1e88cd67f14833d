"""The real server over stdio against the verb registry (core/verb_registry.py): it advertises exactly the registry's
command ids, each has a declared reply, and each job command plans the job its registry line names — the job the
CLI verb of the same line runs."""

from __future__ import annotations

import asyncio

from lsp_helpers import SERVER, WAIT, close, command, plain, setup_client
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from machine_lsp.cli.main import build_parser
from machine_lsp.core.verb_registry import LSP_COMMANDS, VERBS
from machine_lsp.lsp.replies import COMMAND_REPLIES


def test_every_registry_command_has_a_declared_reply():
    assert set(COMMAND_REPLIES) == set(LSP_COMMANDS)


async def test_the_server_advertises_the_registry_and_plans_each_job_as_the_cli_runs_it(tmp_path):
    client: LanguageClient = await ClientServerConfig(server_command=SERVER).start()
    try:
        setup_client(client)
        (tmp_path / ".machine").mkdir()
        init = await asyncio.wait_for(
            client.initialize_session(
                types.InitializeParams(
                    capabilities=client_capabilities("visual-studio-code"), root_uri=tmp_path.as_uri()
                )
            ),
            WAIT,
        )
        assert init.capabilities.execute_command_provider is not None
        advertised = init.capabilities.execute_command_provider.commands
        assert sorted(advertised) == sorted(LSP_COMMANDS)

        cli_jobs = _cli_job_verbs()
        planned = 0
        for verb in VERBS:
            if not (verb.command and verb.job and verb.progress) or verb.command == "machine.validate":
                continue  # validate runs at once (no plan); the rest are the job commands, which plan
            args = {"plan": True, "engine": "local"} | (
                {"objective": "dpo"} if verb.command == "machine.train.preferences" else {}
            )
            plan = plain(await command(client, verb.command, args))
            assert plan["status"] == "plan" and plan["verb"] == verb.job, (verb.command, plan)
            if verb.cli:
                assert cli_jobs[verb.cli] == plan["verb"], verb.cli
            planned += 1
        assert planned >= 7  # smoke, run, preferences, retrain, baseline, checkpoint, probe
    finally:
        await asyncio.wait_for(close(client), WAIT)
        await client.stop()


def _cli_job_verbs() -> dict[str, str]:
    """CLI words -> the job its parsed command line runs (`job_verb`, set from the registry by cli/verb_parsers.py)."""
    parser = build_parser()
    required = {
        "train eval checkpoint": ["latest"],
        "train eval pairs": ["--data", "p.jsonl"],
        "use": ["base", "--agent", "pi"],
    }
    return {
        v.cli: parser.parse_args([*v.cli.split(), *required.get(v.cli, [])]).job_verb
        for v in VERBS
        if v.cli and v.job
    }
