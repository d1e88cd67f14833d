"""What a run on hosted Tinker costs in USD, and whether `[tinker] budget_usd` lets it start.

The rates are the ones Tinker publishes beside its Models & Pricing page, in the machine-readable `models.json` that
tinker-cookbook 0.6's `utils/cost_estimation` reads (one object per model: `tinker_id` and the `prefill`,
`cached_prefill`, `sample` and `train` prices as strings like "$1.87", USD per million tokens). That cookbook needs
tml-renderers>=0.4.1, which the registry does not carry, so its reading rules are followed here rather than
imported: an exact `tinker_id` match (a long-context `:peft:<ctx>` variant has its own prices), all four prices or
none. The file is fetched once per process and kept in memory (a failed fetch is retried after `RETRY_FAILED_S`);
nothing is written to disk. A server on this machine (`machine tinker serve`) costs nothing and is never priced.

A training run is billed at the train rate for every token of every datum it sends (`RunSize.tokens`). The base
model's answers that scope a run (anchors) and the gate's answers are sampling, billed on top at the prefill and
sample rates; the plan names those rates but the budget is held against the training price, the bulk of an SFT
run.
"""

from __future__ import annotations

import os
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import msgspec

PRICING_URL = "https://tinker-docs.thinkingmachines.ai/tinker/models.json"
PRICING_URL_ENV = "MACHINE_TINKER_PRICING_URL"  # a mirror, where [tinker] pricing_url does not name one
FETCH_TIMEOUT_S = 5.0
RETRY_FAILED_S = 600.0
MAX_PRICING_BYTES = 1 << 20  # the published file is a few kB; a bigger answer is not it
TOKENS_PER_MILLION = 1_000_000


class Rates(msgspec.Struct, frozen=True, kw_only=True):
    """USD per million tokens of each kind Tinker bills."""

    prefill: float
    cached_prefill: float
    sample: float
    train: float


class Price(msgspec.Struct, kw_only=True):
    """A run's training price, or why there is none (`usd` None: `reason` says why)."""

    model: str
    tokens: int
    usd: float | None = None
    rates: Rates | None = None
    reason: str = ""

    def describe(self) -> str:
        if self.usd is None or self.rates is None:
            return f"price unknown ({self.reason})"
        return (
            f"about {usd(self.usd)} to train ({self.tokens:,} tokens at ${self.rates.train:g}/M); anchors and the "
            f"gate's answers are billed on top at ${self.rates.prefill:g}/M prefill, ${self.rates.sample:g}/M sampled"
        )


def usd(amount: float) -> str:
    """ "$1.00", or two significant figures under a cent ("$0.00016": a small run is not "$0.00")."""
    return f"${amount:,.2f}" if amount >= 0.01 or amount == 0 else f"${amount:.2g}"


_cache: dict[str, tuple[float, list[dict[str, Any]] | str]] = {}  # url -> (when, entries or why not)
_lock = threading.Lock()


def _parse_price(value: object) -> float | None:
    """ "$1.87" -> 1.87; missing or unreadable -> None."""
    try:
        price = float(str(value).strip().lstrip("$").replace(",", ""))
    except ValueError:
        return None
    return price if price >= 0 else None


def rates_from_entry(entry: dict[str, Any]) -> Rates | None:
    """The four rates of one `models.json` object, or None when any is missing or unreadable."""
    prices = [_parse_price(entry.get(kind)) for kind in ("prefill", "cached_prefill", "sample", "train")]
    if any(price is None for price in prices):
        return None
    prefill, cached_prefill, sample, train = (float(p) for p in prices if p is not None)
    return Rates(prefill=prefill, cached_prefill=cached_prefill, sample=sample, train=train)


def _download(url: str) -> list[dict[str, Any]]:
    # The docs site answers urllib's default User-Agent with 403 (as tinker-cookbook found).
    request = urllib.request.Request(url, headers={"User-Agent": "machine-lsp pricing"})
    with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT_S) as response:  # noqa: S310 (configured URL)
        body = response.read(MAX_PRICING_BYTES + 1)
    if len(body) > MAX_PRICING_BYTES:
        raise ValueError(f"more than {MAX_PRICING_BYTES:,} bytes: not the pricing file")
    data = msgspec.json.decode(body)
    if not isinstance(data, list) or not all(isinstance(entry, dict) for entry in data):
        raise ValueError("not a JSON list of objects")
    return data


def pricing_entries(url: str) -> list[dict[str, Any]] | str:
    """The pricing file at `url` (cached in memory), or one line saying why it could not be read."""
    with _lock:
        cached = _cache.get(url)
        if cached is not None and (
            not isinstance(cached[1], str) or time.monotonic() - cached[0] < RETRY_FAILED_S
        ):
            return cached[1]
        why = f"could not read Tinker's pricing from {url}"
        try:
            found: list[dict[str, Any]] | str = _download(url)
        except urllib.error.HTTPError as exc:
            found = f"{why}: HTTP {exc.code} {exc.reason}"
        except urllib.error.URLError as exc:  # no route, refused, DNS, TLS
            found = f"{why}: {exc.reason}"
        except Exception as exc:  # a timeout or a body that is not the file: the plan says so, nothing else
            found = f"{why}: {exc}"
        _cache[url] = (time.monotonic(), found)
        return found


def training_price(model: str, tokens: int, url: str | None = None) -> Price:
    """The price of training `tokens` tokens on `model` at the published train rate."""
    source = url or os.environ.get(PRICING_URL_ENV) or PRICING_URL
    entries = pricing_entries(source)
    if isinstance(entries, str):
        return Price(model=model, tokens=tokens, reason=entries)
    entry = next((e for e in entries if e.get("tinker_id") == model), None)
    if entry is None:
        return Price(model=model, tokens=tokens, reason=f"{model} is not listed in {source}")
    rates = rates_from_entry(entry)
    if rates is None:
        return Price(model=model, tokens=tokens, reason=f"{model}'s entry in {source} lacks a price")
    return Price(model=model, tokens=tokens, usd=tokens * rates.train / TOKENS_PER_MILLION, rates=rates)


def budget_refusal(price: Price, budget_usd: float | None) -> str | None:
    """Why `[tinker] budget_usd` refuses this run (None: it may start). An unknown price is refused too: a budget
    that cannot be checked is not kept."""
    if budget_usd is None:
        return None
    if price.usd is None:
        return f"[tinker] budget_usd is ${budget_usd:g} but the price is unknown: {price.reason}"
    if price.usd > budget_usd:
        return (
            f"the run would cost about {usd(price.usd)} to train ({price.tokens:,} tokens at "
            f"${price.rates.train if price.rates else 0:g}/M), over [tinker] budget_usd ${budget_usd:g}"
        )
    return None


def plan_price(verb: str, project: Path, job_args: dict[str, Any]) -> tuple[Price | None, str | None]:
    """(the price of the training job `verb` would start, why `[tinker] budget_usd` refuses it), from the job's
    estimate (scaffold.estimate: characters, not a tokenizer); (None, None) off hosted Tinker or when the job
    cannot be sized yet (the job then says why)."""
    from machine_lsp.scaffold.config import (
        TRAIN_KEYS,
        ConfigError,
        apply_overrides,
        load_project_config,
        tinker_costs_money,
    )
    from machine_lsp.scaffold.estimate import TRAINING_VERBS, estimate_job

    try:
        config, _ = load_project_config(project, job_args.get("config"))
        config = apply_overrides(config, {k: job_args.get(k) for k in TRAIN_KEYS})
    except ConfigError:
        return None, None
    if verb not in TRAINING_VERBS or config.train.engine != "tinker" or not tinker_costs_money(project):
        return None, None
    estimate = estimate_job(verb, project, job_args)
    if estimate is None:
        return None, None
    price = training_price(config.train.resolved_model(), estimate.tokens, config.tinker.pricing_url)
    return price, budget_refusal(price, config.tinker.budget_usd)
