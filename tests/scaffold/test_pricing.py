"""The USD price of a hosted Tinker run and `[tinker] budget_usd`, with the pricing file served over real HTTP on
127.0.0.1 in Tinker's published shape: the reader, the editor's plan, the CLI and the job itself refuse a run over
the budget or of unknown price before anything starts. (Hosted Tinker is not reachable here: the run is proven up
to that boundary, and the real pricing URL's failure is checked for its one-line reason.)"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from machine_lsp.cli.main import main
from machine_lsp.lsp.plan import plan_job
from machine_lsp.scaffold import pricing

MODEL = "Qwen/Qwen3-8B"
ENTRIES = [  # the published file's shape: prices as "$" strings, USD per million tokens
    {"tinker_id": MODEL, "prefill": "$0.13", "cached_prefill": "$0.07", "sample": "$0.40", "train": "$0.40"},
    {"tinker_id": "half/priced", "prefill": "$1", "sample": "$2"},
]


class _Files(BaseHTTPRequestHandler):
    bodies: dict[str, bytes] = {}

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = self.bodies.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    _Files.bodies = {
        "/models.json": json.dumps(ENTRIES).encode(),
        "/huge.json": b"[" + b" " * (pricing.MAX_PRICING_BYTES + 10) + b"]",
        "/object.json": b'{"not": "a list"}',
    }
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pricing, "_cache", {})
    monkeypatch.delenv("TINKER_BASE_URL", raising=False)  # hosted Tinker: the priced case


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_price_is_the_train_rate_times_every_trained_token(site: str) -> None:
    price = pricing.training_price(MODEL, 2_500_000, f"{site}/models.json")
    assert price.usd == pytest.approx(1.0) and price.rates is not None and price.rates.prefill == 0.13
    assert price.describe().startswith("about $1.00 to train (2,500,000 tokens at $0.4/M)")
    assert pricing.budget_refusal(price, 2.0) is None
    refusal = pricing.budget_refusal(price, 0.5)
    assert refusal is not None and "over [tinker] budget_usd $0.5" in refusal and "$1.00 to train" in refusal


@pytest.mark.parametrize(
    ("model", "path", "reason"),
    [
        ("not/listed", "/models.json", "not/listed is not listed in"),
        ("half/priced", "/models.json", "half/priced's entry in"),
        (MODEL, "/missing.json", ": HTTP 404 Not Found"),
        (MODEL, "/huge.json", "not the pricing file"),
        (MODEL, "/object.json", "not a JSON list of objects"),
    ],
)
def test_a_price_that_cannot_be_told_says_why_and_a_budget_refuses_it(
    site: str, model: str, path: str, reason: str
) -> None:
    price = pricing.training_price(model, 1000, f"{site}{path}")
    assert price.usd is None and reason in price.reason, price.reason
    assert price.describe() == f"price unknown ({price.reason})" and "\n" not in price.reason
    assert pricing.budget_refusal(price, None) is None  # no budget: the plan says "unknown" and goes on
    refusal = pricing.budget_refusal(price, 5.0)
    assert refusal is not None and refusal.startswith("[tinker] budget_usd is $5 but the price is unknown")


def test_an_unreachable_pricing_url_is_read_once_then_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/models.json"
    first = pricing.training_price(MODEL, 10, url)
    assert first.usd is None and first.reason.endswith("Connection refused") and url in first.reason
    calls: list[str] = []
    monkeypatch.setattr(pricing, "_download", lambda u: calls.append(u) or [])
    assert (
        pricing.training_price(MODEL, 10, url).reason == first.reason and calls == []
    )  # not retried at once


def _project(tmp_path: Path, tinker: str) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"{a}+1?"},
                {"role": "assistant", "content": f"answer: {a + 1}"},
            ]
        }
        for a in range(12)
    ]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "machine.toml").write_text(
        f'[train]\nengine = "tinker"\nmodel = "{MODEL}"\ndata = "train.jsonl"\n\n[tinker]\n{tinker}\n'
    )
    (tmp_path / ".machine").mkdir()
    return tmp_path


def test_the_editors_plan_shows_the_price_and_refuses_a_run_over_budget(site: str, tmp_path: Path) -> None:
    url = f'pricing_url = "{site}/models.json"'
    plan = plan_job("train-run", _project(tmp_path / "a", url), {})
    assert plan.costs_money and plan.problem is None
    assert (
        plan.message is not None
        and "about $0.00016 to train (396 tokens" in plan.message
        and "tokens at $0.4/M" in plan.message
    )
    over = plan_job("train-run", _project(tmp_path / "b", f"{url}\nbudget_usd = 0.000001"), {})
    assert over.problem is not None and "over [tinker] budget_usd $1e-06" in over.problem


def test_a_server_on_this_machine_is_never_priced(site: str, tmp_path: Path) -> None:
    project = _project(
        tmp_path, f'pricing_url = "{site}/nowhere"\nbudget_usd = 1\nbase_url = "http://127.0.0.1:1"'
    )
    plan = plan_job("train-run", project, {})
    assert not plan.costs_money and plan.problem is None and "price" not in (plan.message or "")


def test_the_cli_refuses_a_run_over_budget_even_with_yes(
    site: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = _project(tmp_path, f'pricing_url = "{site}/models.json"\nbudget_usd = 0.000001')
    monkeypatch.chdir(project)
    assert main(["train", "run", "--yes"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "train run not started: the run would cost about $" in err, err
    assert not (project / ".machine" / "runs").exists() or not any((project / ".machine" / "runs").iterdir())
