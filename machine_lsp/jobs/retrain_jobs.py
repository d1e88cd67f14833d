"""The `retrain` job (`machine retrain`, LSP `machine.retrain`, *Machine: Retrain and Reload*): the loop in one verb.

Train on the store's good rows (scoped with anchors, sized from the rows: the `train-run` job, always from the store)
-> the eval gate, which promotes a passing checkpoint -> a running `machine serve promoted` follows the promotion on
its own. The progress is train-run's events; the job ends with one paragraph (`summary`): rows and anchors, steps,
the held-out delta with the exact McNemar p, bleed, tool retention, and promoted or why not.
"""

from __future__ import annotations

from typing import Any

import msgspec

from machine_lsp.jobs.runner import JobContext
from machine_lsp.jobs.train_jobs import StoreRunArgs, TrainArgs, train_run

RetrainArgs = StoreRunArgs  # the job's arguments, by the name the verb registry gives them


def retrain(ctx: JobContext, args: RetrainArgs) -> tuple[dict[str, Any], str]:
    train_args = TrainArgs(**msgspec.structs.asdict(args), objective="sft")
    result, _message = train_run(ctx, train_args, from_store=True)
    text = summary(result)
    ctx.log(text)
    result["summary"] = text
    return result, text


def summary(result: dict[str, Any]) -> str:
    """One paragraph: what was trained on, how long, what the gate measured, and what is served next."""
    parts = [_trained(result), _measured(result.get("gate") or {})]
    return " ".join(p for p in parts if p)


def _trained(result: dict[str, Any]) -> str:
    anchors = result.get("anchors") or {}
    plan = result.get("plan") or {}
    tagged = anchors.get("tagged_rows", plan.get("rows", 0))
    added = anchors.get("added", 0)
    if added:
        counts = anchors.get("counts") or {}
        scoped = (
            f" plus {added} anchor rows (the base model's own answers: {counts.get('pool', 0)} built-in prompts, "
            f"{counts.get('agent_turns', 0)} untagged agent turns)"
        )
    else:
        scoped = f" with no anchor rows ({anchors.get('note') or 'none planned'})"
    loss = ""
    if result.get("first_loss") is not None and result.get("final_loss") is not None:
        loss = f", loss {result['first_loss']:.3f} -> {result['final_loss']:.3f}"
    steps = result.get("steps_run", 0)
    return (
        f"Retrained on {tagged} tagged rows{scoped}: {steps} step{'s' * (steps != 1)}{loss}, "
        f"checkpoint {result.get('checkpoint')}."
    )


def _measured(gate: dict[str, Any]) -> str:
    reason = gate.get("reason") or "no gate verdict"
    metrics = gate.get("metrics")
    if gate.get("skipped") or not metrics:
        return f"The gate did not run ({reason}); nothing was promoted, and the served checkpoint stays as it is."
    rows = metrics["eval_rows"]
    delta = (metrics["candidate_correct"] - metrics["reference_correct"]) / rows if rows else 0.0
    text = (
        f"On {rows} held-out rows it got {metrics['candidate_correct']}/{rows} right against "
        f"{metrics['reference_correct']}/{rows} for {metrics['reference']} (delta {delta:+.0%}, gained "
        f"{metrics['gained']}, lost {metrics['lost']}, exact McNemar p = {metrics['mcnemar_p']:.3g})"
    )
    if metrics.get("candidate_bleed_rate") is not None:
        text += f"; bleed {metrics['candidate_bleed_rate']:.0%} of the off-distribution probes"
    if metrics.get("candidate_context_bleed_rate") is not None:
        text += f" ({metrics['candidate_context_bleed_rate']:.0%} asked in the tagged rows' context)"
    if metrics.get("tool_retention") is not None:
        text += f"; tool calls kept on {metrics['tool_calls_kept']}/{metrics['reference_tool_calls']} probes"
    else:
        text += "; tool retention not measurable (the reference calls no tool on the probes)"
    if gate.get("promoted"):
        return text + ". Promoted: a running `machine serve promoted` loads it without a restart."
    return (
        text
        + f". Not promoted, the served checkpoint stays as it is: {reason.removeprefix('not promoted: ')}."
    )
