"""PNG charts (matplotlib, Agg backend, imported lazily): the loss curve of a run and a comparison of two evals."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from machine_lsp.core.evals import Comparison


def _pyplot():  # noqa: ANN202
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(plt: Any, fig: Any, path: Path) -> Path:
    """Write the figure beside `path`, then rename it over: a reader never sees half a PNG."""
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)
    return path


def loss_chart(
    steps: Sequence[int], losses: Sequence[float], path: Path, title: str = "training loss"
) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    ax.plot(list(steps), list(losses), marker="o" if len(steps) <= 40 else None, linewidth=1.5)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (mean NLL of trained tokens)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return _save(plt, fig, path)


def compare_chart(c: Comparison, path: Path) -> Path:
    plt = _pyplot()
    metrics = ["accuracy", "format rate"]
    a_vals = [c.a_accuracy, c.a_format_rate]
    b_vals = [c.b_accuracy, c.b_format_rate]
    if c.a_bleed_rate is not None or c.b_bleed_rate is not None:
        metrics.append("bleed rate")
        a_vals.append(c.a_bleed_rate or 0.0)
        b_vals.append(c.b_bleed_rate or 0.0)
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(9, 3.5), dpi=100, gridspec_kw={"width_ratios": [3, 2]})
    xs = range(len(metrics))
    width = 0.38
    bars_a = ax.bar([x - width / 2 for x in xs], a_vals, width, label=c.a_name)
    bars_b = ax.bar([x + width / 2 for x in xs], b_vals, width, label=c.b_name)
    for bars in (bars_a, bars_b):
        for bar in bars:
            ax.annotate(
                f"{bar.get_height():.0%}",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=8,
            )
    ax.set_xticks(list(xs), metrics)
    ax.set_ylim(0, 1.1)
    ax.set_title(f"{c.a_name} vs {c.b_name} (n={c.n}, McNemar p={c.mcnemar_p:.3g})")
    ax.legend(fontsize=8)
    labels = ["both right", "gained", "lost", "both wrong"]
    counts = [c.both_correct, c.gained, c.lost, c.both_wrong]
    ax2.bar(labels, counts, color=["#4c9f70", "#3b7dd8", "#d9534f", "#999999"])
    for i, v in enumerate(counts):
        ax2.annotate(str(v), (i, v), ha="center", va="bottom", fontsize=8)
    ax2.set_title("row outcomes")
    return _save(plt, fig, path)
