"""The local engine on the real SmolLM2: training, checkpoints, sampling. No mocks of torch or the model."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
import tinker
from engine_helpers import MODEL, TrainedRun, arithmetic_rows

from machine_lsp.core.schema import Message
from machine_lsp.engines import render
from machine_lsp.engines.base import (
    EngineError,
    LoraSettings,
    Sampler,
    Trainer,
    get_engine,
    local_address,
    parse_local_address,
    resolve_local_checkpoint,
)
from machine_lsp.engines.local.local_batching import length_groups

REPO = Path(__file__).resolve().parents[2]

# ----------------------------------------------------------------------------------------------- pure helpers


def test_length_groups_bound_padding_and_size() -> None:
    lengths = [30, 12, 29, 11, 60, 31, 12, 28]
    groups = length_groups(lengths, max_tokens=100, max_padding=0.10)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for group in groups:
        width = max(lengths[i] for i in group)
        padded = width * len(group)
        real = sum(lengths[i] for i in group)
        assert len(group) == 1 or padded <= 100
        assert 1 - real / padded <= 0.10
    assert [sorted(lengths[i] for i in g) for g in groups] == [[60], [29, 30, 31], [28], [11, 12, 12]]
    assert length_groups([5, 5, 5], max_tokens=1000, max_padding=0.0) == [[0, 1, 2]]


def test_one_name_rule_for_runs_results_and_checkpoints() -> None:
    """engines.base.check_name is core.runs.check_name's rule (before, `_tmp` and `v1+lora` passed one, not the
    other): a name the CLI and the editor take for a run or result is a checkpoint name too, and the reverse."""
    from machine_lsp.core import runs
    from machine_lsp.engines.base import check_name

    for name in ("_tmp", "v1+lora", "step-10", "a.b", ".hidden", "-rf", "..", "a/b", "", "x" * 129, "é"):
        try:
            runs.check_name(name)
            core_takes = True
        except ValueError:
            core_takes = False
        try:
            check_name(name)
            engine_takes = True
        except EngineError:
            engine_takes = False
        assert core_takes == engine_takes, name
    assert check_name("_tmp") == "_tmp" and check_name("v1+lora") == "v1+lora"


def test_addresses_round_trip_and_refuse_bad_input(tmp_path: Path) -> None:
    assert local_address("run-1", "step-10") == "local://run-1/step-10"
    assert parse_local_address("local://run-1/step-10") == ("run-1", "step-10")
    for bad in ("local://run-1", "local://a/b/c", "local://../x", "file://x/y", "local://a/"):
        with pytest.raises(EngineError):
            parse_local_address(bad)
    with pytest.raises(EngineError, match="checkpoint name '../../etc' is not a valid name"):
        local_address("run", "../../etc")
    store = tmp_path / ".machine"
    (store / "runs" / "r1" / "checkpoints" / "ok").mkdir(parents=True)
    (store / "runs" / "r1" / "checkpoints" / "ok" / "manifest.json").write_text("{}")
    (store / "runs" / "r1" / "checkpoints" / "half").mkdir()
    assert resolve_local_checkpoint("local://r1/ok", store) == store / "runs" / "r1" / "checkpoints" / "ok"
    with pytest.raises(EngineError, match="no run 'r2'"):
        resolve_local_checkpoint("local://r2/ok", store)
    with pytest.raises(EngineError, match=r"has no checkpoint 'nope' \(it has: half, ok\)"):
        resolve_local_checkpoint("local://r1/nope", store)
    with pytest.raises(EngineError, match="no manifest.json"):
        resolve_local_checkpoint("local://r1/half", store)
    with pytest.raises(EngineError, match="Tinker checkpoint"):
        resolve_local_checkpoint("tinker://abc/sampler_weights/x", store)


def test_settings_are_validated() -> None:
    with pytest.raises(EngineError, match="rank"):
        LoraSettings(rank=0)
    with pytest.raises(EngineError, match="learning rate"):
        LoraSettings(learning_rate=0.0)
    with pytest.raises(EngineError, match="unknown engine 'gpu'"):
        get_engine("gpu")
    assert msgspec.json.decode(msgspec.json.encode(LoraSettings()), type=LoraSettings) == LoraSettings()


def test_unknown_model_is_refused_without_download() -> None:
    from machine_lsp.engines.local.local import LocalEngine

    with pytest.raises(EngineError, match="hub names are never downloaded"):
        LocalEngine(threads=1).model_path("Qwen/Qwen3-8B")


# ----------------------------------------------------------------------------------------------- real model


@pytest.mark.slow
def test_training_loss_is_finite_and_falls(trained_run: TrainedRun) -> None:
    losses = trained_run.losses
    assert all(math.isfinite(x) for x in losses), losses
    assert losses[0] > 1.0  # the base model does not answer "answer: N"
    assert losses[-1] < 0.5 * losses[0], losses
    assert min(losses[-3:]) < min(losses[:3]), losses
    assert isinstance(trained_run.trainer, Trainer)
    assert isinstance(trained_run.trainer.sampler(), Sampler)


@pytest.mark.slow
def test_trained_model_learns_the_format(trained_run: TrainedRun) -> None:
    outputs = trained_run.trained_outputs
    assert sum(o.startswith("answer: ") for o in outputs) >= 4, outputs
    assert outputs[0] == "answer: 7" and outputs[1] == "answer: 42"  # the trained rows themselves
    assert all("<|im_end|>" not in o for o in outputs)


@pytest.mark.slow
def test_step_stats_and_padding(trained_run: TrainedRun) -> None:
    trainer = trained_run.trainer
    rows = arithmetic_rows([(1, 2), (100, 200), (3, 4), (1000, 2000)])
    datums = render.to_datums(rows, trainer.renderer)
    counts = render.count_tokens(datums)
    before = [p.detach().clone() for p in trainer.params]
    stats = trainer.forward_backward(datums)
    assert stats.tokens == counts.tokens and stats.trained_tokens == counts.trained
    assert stats.tokens <= stats.padded_tokens <= 1.10 * stats.tokens
    assert math.isfinite(stats.loss) and stats.loss > 0
    trainer.optimizer.zero_grad(set_to_none=True)  # do not let this probe change the shared run
    assert all(bool((p == b).all()) for p, b in zip(trainer.params, before, strict=True))


@pytest.mark.slow
def test_bad_batches_are_refused(trained_run: TrainedRun) -> None:
    trainer = trained_run.trainer
    with pytest.raises(EngineError, match="empty batch"):
        trainer.forward_backward([])
    good = render.to_datum(arithmetic_rows()[0], trainer.renderer)
    vocab = trainer.vocab_size
    bad_token = tinker.Datum(
        model_input=tinker.ModelInput.from_ints([1, vocab + 5]),
        loss_fn_inputs={"target_tokens": [vocab + 5, 2], "weights": [1.0, 1.0]},
    )
    with pytest.raises(EngineError, match=f"datum 1 has token id {vocab + 5}, outside the vocabulary"):
        trainer.forward_backward([good, bad_token])
    zero = tinker.Datum(
        model_input=tinker.ModelInput.from_ints([1, 2]),
        loss_fn_inputs={"target_tokens": [2, 2], "weights": [0.0, 0.0]},
    )
    with pytest.raises(EngineError, match="every loss weight in the batch is zero"):
        trainer.forward_backward([zero])
    negative = tinker.Datum(
        model_input=tinker.ModelInput.from_ints([1, 2]),
        loss_fn_inputs={"target_tokens": [2, 2], "weights": [1.0, -1.0]},
    )
    with pytest.raises(EngineError, match="datum 0 has a negative or non-finite loss weight"):
        trainer.forward_backward([negative])
    with pytest.raises(EngineError, match="learning rate"):
        trainer.optim_step(float("nan"))
    assert all(p.grad is None for p in trainer.params)


@pytest.mark.slow
def test_checkpoint_layout_and_no_overwrite(trained_run: TrainedRun) -> None:
    path = resolve_local_checkpoint(trained_run.address, trained_run.store_root)
    assert path == trained_run.run_dir / "checkpoints" / "step-8"
    assert {p.name for p in path.iterdir()} >= {
        "adapter_model.safetensors",
        "adapter_config.json",
        "optimizer.pt",
        "manifest.json",
    }
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["address"] == "local://test-run/step-8"
    assert manifest["base_model"] == MODEL and manifest["renderer"] == "qwen3_instruct"
    assert manifest["step"] == 8 and manifest["lora"]["rank"] == 16
    before = (path / "adapter_model.safetensors").read_bytes()
    with pytest.raises(EngineError, match="already exists"):
        trained_run.trainer.save("step-8")
    assert (path / "adapter_model.safetensors").read_bytes() == before
    assert not list(path.parent.glob(".*tmp-*"))


@pytest.mark.slow
def test_batched_sampling_equals_one_at_a_time(trained_run: TrainedRun) -> None:
    sampler = trained_run.trainer.sampler()
    prompts = [
        *trained_run.prompts,
        [Message(role="user", content="Name a colour, in one long sentence please.")],
    ]
    batched = sampler.sample(prompts, 16)
    single = [sampler.sample([p], 16)[0] for p in prompts]
    assert batched == single
    assert batched[: len(trained_run.trained_outputs)] == trained_run.trained_outputs


@pytest.mark.slow
def test_prompts_in_one_long_system_prompt_share_its_prefill_and_answer_as_alone(
    trained_run: TrainedRun,
) -> None:
    from machine_lsp.engines import render
    from machine_lsp.engines.local import local_sampler

    sampler = trained_run.trainer.sampler()
    system = Message(role="system", content="You are a careful assistant inside a coding agent. " * 20)
    questions = ["What is 3 plus 4?", "What is 12 plus 30?", "Name a colour.", "What is 40 plus 2?"]
    prompts = [[system, Message(role="user", content=q)] for q in questions]
    prompts.append([Message(role="user", content="What is 9 plus 9?")])  # bare: batched on its own
    tokens = [render.prompt_tokens(p, sampler.renderer) for p in prompts]
    batches = local_sampler.batches(tokens, 32)
    shared = [(sorted(chunk), prefix) for chunk, prefix in batches if prefix]
    assert len(shared) == 1 and shared[0][0] == [0, 1, 2, 3] and shared[0][1] > 200, batches
    together = sampler.sample(prompts, 16)
    alone = [sampler.sample([p], 16)[0] for p in prompts]
    assert together == alone


def test_batches_group_prompts_by_shared_prefix_and_the_rest_by_length() -> None:
    from machine_lsp.engines.local.local_sampler import MIN_SHARED_PREFIX, batches

    system = list(range(1000, 1010 + MIN_SHARED_PREFIX))
    prompts = [[1, 2, 3], system + [7, 8], [4] * 10, system + [5], system, [9]]
    out = batches(prompts, 32)
    # the prompt that is only the prefix keeps one token of its own: the shared part is one shorter
    assert out[0] == ([4, 3, 1], len(system) - 1)
    assert out[1:] == [([5, 0, 2], 0)]  # the rest by length, then position, as without sharing
    assert [len(chunk) for chunk, _ in batches(prompts, 2)] == [2, 2, 2]  # a size bound for shared groups too
    assert batches([[1], [2]], 32) == [([0, 1], 0)]


@pytest.mark.slow
def test_base_sampler_disables_the_adapter(trained_run: TrainedRun) -> None:
    prompts = trained_run.prompts[:2]
    base = trained_run.trainer.base_sampler().sample(prompts, 12)
    fresh = trained_run.engine.sampler_for(MODEL, None).sample(prompts, 12)
    assert base == fresh
    assert not any(o.startswith("answer:") for o in base), base
    # and the adapter is back on afterwards
    assert trained_run.trainer.sampler().sample(prompts, 12) == trained_run.trained_outputs[:2]


@pytest.mark.slow
def test_reload_in_a_fresh_process_gives_identical_outputs(trained_run: TrainedRun) -> None:
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "import msgspec\n"
        "from machine_lsp.core.schema import Message\n"
        "from machine_lsp.engines.base import get_engine\n"
        "engine = get_engine('local', threads=1, store_root=Path(sys.argv[1]))\n"
        "prompts = msgspec.json.decode(sys.argv[3], type=list[list[Message]])\n"
        "print(json.dumps(engine.sampler_for(sys.argv[2], sys.argv[4]).sample(prompts, 16)))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            str(trained_run.store_root),
            MODEL,
            msgspec.json.encode(trained_run.prompts).decode(),
            trained_run.address,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == trained_run.trained_outputs


@pytest.mark.slow
def test_resume_restores_weights_and_step(trained_run: TrainedRun) -> None:
    engine = trained_run.engine
    with pytest.raises(EngineError, match="LoRA rank 16"):
        engine.create_trainer(
            MODEL, LoraSettings(rank=8), trained_run.run_dir.parent / "r2", resume_from=trained_run.address
        )
    resumed = engine.create_trainer(
        MODEL, LoraSettings(), trained_run.run_dir.parent / "r3", resume_from=trained_run.address
    )
    assert resumed.step == 8
    assert resumed.sampler().sample(trained_run.prompts, 16) == trained_run.trained_outputs
    assert resumed.save("again") == "local://r3/again"


@pytest.mark.slow
def test_adam_settings_are_the_torch_optimizers(trained_run: TrainedRun) -> None:
    """One Adam for both engines: the cookbook's defaults, or what LoraSettings.optimizer (machine.toml) says."""
    from machine_lsp.engines.base import OptimizerSettings

    assert trained_run.trainer.lora.optimizer == OptimizerSettings(beta1=0.9, beta2=0.95, eps=1e-8)
    assert all(
        g["eps"] == 1e-8 and g["betas"] == (0.9, 0.95) for g in trained_run.trainer.optimizer.param_groups
    )
    lora = LoraSettings(optimizer=OptimizerSettings(beta1=0.8, beta2=0.99, eps=1e-6))
    other = trained_run.engine.create_trainer(MODEL, lora, trained_run.run_dir.parent / "adam")
    groups = other.optimizer.param_groups
    assert all(g["eps"] == 1e-6 and g["betas"] == (0.8, 0.99) and g["weight_decay"] == 0.0 for g in groups)


@pytest.mark.slow
def test_a_local_model_directory_works_as_the_model(
    smollm2_dir: Path, trained_run: TrainedRun, tmp_path: Path
) -> None:
    """Any HF directory is a model: here the converted SmolLM2 files linked into a directory of another name
    (without our conversion marker, so the renderer is inferred from the tokenizer's ChatML tokens)."""
    local_engine = trained_run.engine
    other = tmp_path / "my-model"
    other.mkdir()
    for item in smollm2_dir.iterdir():
        if item.name != "machine-lsp-conversion.json":
            (other / item.name).symlink_to(item)
    assert local_engine.renderer_name(str(other)) == "qwen3_instruct"
    _, by_path = render.load_tokenizer_and_renderer(str(other))
    _, by_name = render.load_tokenizer_and_renderer(MODEL)
    row = arithmetic_rows()[0]
    assert render.datum_tokens(render.to_datum(row, by_path)) == render.datum_tokens(
        render.to_datum(row, by_name)
    )
    prompts = [row[:1]]
    assert local_engine.sampler_for(str(other), None).sample(prompts, 6) == local_engine.sampler_for(
        MODEL, None
    ).sample(prompts, 6)
    with pytest.raises(EngineError, match="trained on HuggingFaceTB/SmolLM2-135M-Instruct"):
        local_engine.sampler_for(str(other), trained_run.address)
