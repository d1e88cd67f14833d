"""Rows -> `tinker.Datum`, the one rendering path for both engines.

tinker-cookbook's renderers are the authority on chat token formats: a conversation becomes tokens and per-token
loss weights through `renderer.build_supervised_example` (via `supervised.data.conversation_to_datum`), exactly
what the Tinker service would be sent. SmolLM2 (ChatML) uses the `qwen3_instruct` renderer: no system prompt is
injected, and loss falls only on the assistant text and its `<|im_end|>` (the newline after it belongs to the
next message's header).

Weights: `conversation_to_datum`'s default `reduction="mean"` (each datum's weights sum to 1, the cookbook's SFT
default); `reduction="none"` keeps 0/1 weights. The local engine's loss is sum(w * nll) / sum(w) over a batch.
`token_weighted` turns 0/1 datums into a token mean at the cookbook's scale (a scoped run trains that way).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from machine_lsp.core.schema import Message, to_cookbook_messages
from machine_lsp.engines import smollm2
from machine_lsp.engines.base import EngineError

if TYPE_CHECKING:  # pragma: no cover
    import tinker

os.environ.setdefault("HF_HUB_OFFLINE", "1")

Reduction = Literal["mean", "none"]
TRAIN_ON_CHOICES: tuple[str, ...] = (
    "last_assistant_message",
    "last_assistant_turn",
    "all_assistant_messages",
    "all_messages",
    "all_tokens",
    "all_user_and_system_messages",
    "customized",
)
DEFAULT_TRAIN_ON = "all_assistant_messages"


class TokenCounts(msgspec.Struct, frozen=True):
    tokens: int  # model input length (the datum's input tokens)
    trained: int  # target tokens with non-zero weight


def is_local_model_dir(model: str) -> bool:
    path = Path(model).expanduser()
    return path.is_dir() and (path / "config.json").is_file()


def renderer_name_for(model: str, tokenizer: Any | None = None) -> str:
    """The cookbook renderer for `model`.

    SmolLM2 -> `qwen3_instruct`. A local HF directory: its config's original name if the cookbook knows it, else
    inferred from the tokenizer's special tokens (ChatML -> `qwen3_instruct`, Llama 3 headers -> `llama3`, else
    `role_colon`). Any other name: `tinker_cookbook.model_info.get_recommended_renderer_name`.
    """
    from tinker_cookbook import model_info

    if smollm2.is_smollm2(model):
        return smollm2.RENDERER_NAME
    if is_local_model_dir(model):
        directory = Path(model).expanduser()
        if (directory / smollm2.MARKER_FILE).is_file():
            return smollm2.RENDERER_NAME
        tok = tokenizer if tokenizer is not None else _local_tokenizer(str(directory))
        vocab = tok.get_vocab()
        if "<|im_start|>" in vocab and "<|im_end|>" in vocab:
            return "qwen3_instruct"
        if "<|start_header_id|>" in vocab and "<|eot_id|>" in vocab:
            return "llama3"
        return "role_colon"
    try:
        return model_info.get_recommended_renderer_name(model)
    except Exception as exc:  # cookbook raises ConfigurationError / KeyError for unknown models
        raise EngineError(
            f"no known chat renderer for model {model!r} ({exc}); pass the renderer explicitly "
            f"(e.g. qwen3_instruct for ChatML models, llama3, role_colon)"
        ) from None


@functools.cache
def _local_tokenizer(directory: str) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(directory)
    except Exception as exc:
        raise EngineError(f"cannot load a tokenizer from the model directory {directory}: {exc}") from exc


# transformers' own once-per-tokenizer flag for "Token indices sequence length is longer than the specified maximum
# sequence length for this model (N > M)": set, the warning is never logged.
_TOO_LONG_WARNING = "sequence-length-is-longer-than-the-specified-maximum"


def load_tokenizer(model: str) -> Any:
    """The tokenizer for `model`, offline: SmolLM2 from its GGUF/cache, a local HF directory, a registered name,
    or a name already in the Hugging Face cache.

    Its warning about sequences longer than the model's maximum is switched off: this tool tokenizes whole files
    and requests to count and render them, and says itself what is too long (validate's `too-long` finding with
    `--max-length`, the server's context check), in its own words, where transformers would print a raw log line
    to the terminal (once, with no file or line)."""
    tok = _load_tokenizer(model)
    warned = getattr(tok, "deprecation_warnings", None)
    if isinstance(warned, dict):
        warned[_TOO_LONG_WARNING] = True
    return tok


def _load_tokenizer(model: str) -> Any:
    from tinker_cookbook import tokenizer_utils

    if smollm2.is_smollm2(model):
        smollm2.register()
        return tokenizer_utils.get_tokenizer(smollm2.MODEL_NAME)
    if is_local_model_dir(model):
        return _local_tokenizer(str(Path(model).expanduser()))
    try:
        return tokenizer_utils.get_tokenizer(model)
    except Exception as exc:
        reason = " ".join(str(exc).split())
        raise EngineError(
            f"the tokenizer for {model!r} is not available offline ({type(exc).__name__}: {reason}). "
            f"Make it available by passing a local Hugging Face model directory as the model, by putting it in "
            f"the Hugging Face cache (HF_HOME) from a machine with network access, or by setting HF_HUB_OFFLINE=0 "
            f"to let transformers download it; the embedded model {smollm2.MODEL_NAME} needs none of these."
        ) from None


def load_tokenizer_and_renderer(model: str, renderer: str | None = None) -> tuple[Any, Any]:
    """(tokenizer, cookbook renderer) for `model`; `renderer` overrides the recommended renderer name."""
    from tinker_cookbook import renderers

    tok = load_tokenizer(model)
    name = renderer or renderer_name_for(model, tok)
    try:
        return tok, renderers.get_renderer(name, tok)
    except Exception as exc:
        raise EngineError(f"renderer {name!r} does not work with the tokenizer of {model!r}: {exc}") from exc


def train_on_what(value: str | Any) -> Any:
    """A cookbook `TrainOnWhat` from its value (e.g. "all_assistant_messages"); precise error otherwise."""
    from tinker_cookbook.renderers import TrainOnWhat

    if isinstance(value, TrainOnWhat):
        return value
    try:
        return TrainOnWhat(str(value))
    except ValueError:
        raise EngineError(
            f"unknown train_on value {value!r}: choose one of {', '.join(TRAIN_ON_CHOICES)}"
        ) from None


def cookbook_messages(messages: Sequence[Message], train_on: Any | None = None) -> list[dict[str, Any]]:
    """Core messages -> cookbook `renderers.Message` dicts (tool calls as cookbook `ToolCall` objects).

    `developer` becomes `system`: ChatML (qwen3_instruct), llama3 and role_colon have no developer role (they would
    print `<|im_start|>developer`), and OpenAI's chat API treats a developer message as the system prompt of
    non-reasoning models; the cookbook's openai_compat layer passes roles through unchanged, so the mapping is ours.
    With `train_on` given and any message carrying `weight` or `trainable`, every message gets the cookbook's
    `trainable` flag (for TrainOnWhat.CUSTOMIZED): see `trained_flags`."""
    from tinker_cookbook.renderers import ToolCall

    out = to_cookbook_messages(messages)
    for item in out:
        if item["role"] == "developer":
            item["role"] = "system"
        if "tool_calls" in item:
            item["tool_calls"] = [ToolCall.model_validate(call) for call in item["tool_calls"]]
    if train_on is not None and has_training_flags(messages):
        for item, flag in zip(out, trained_flags(messages, train_on), strict=True):
            item["trainable"] = flag
    return out


def has_training_flags(messages: Sequence[Message]) -> bool:
    return any(m.weight is not None or m.trainable is not None for m in messages)


def trained_flags(messages: Sequence[Message], train_on: Any) -> list[bool]:
    """Which messages train when the rows say so per message: `trainable` (cookbook) wins, then `weight`
    (OpenAI, 0 or 1: read on assistant messages only); a message with neither trains as `train_on` would train it
    (OpenAI's default is weight 1 for every assistant message, i.e. all_assistant_messages)."""
    what = train_on_what(train_on).value
    last_assistant = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=-1)
    flags = []
    for index, message in enumerate(messages):
        if message.trainable is not None:
            flags.append(message.trainable)
        elif message.weight is not None and message.role == "assistant":
            flags.append(message.weight == 1)
        elif what in ("all_messages", "all_tokens"):
            flags.append(True)
        elif what == "all_user_and_system_messages":
            flags.append(message.role in ("user", "system", "developer"))
        elif what in ("last_assistant_message", "last_assistant_turn"):
            flags.append(index == last_assistant)
        else:
            flags.append(message.role == "assistant")
    return flags


def tool_prefix(
    tools: Sequence[Any] | None, messages: list[dict[str, Any]], renderer: Any
) -> list[dict[str, Any]]:
    """`messages` with the row's OpenAI `tools` declared the renderer's own way: the cookbook's
    `create_conversation_prefix_with_tools` (qwen3_instruct: a system message with a <tools> block) replaces a
    leading system message, whose text it keeps as the system prompt."""
    if not tools:
        return messages
    from tinker_cookbook.third_party.openai_compat import openai_tools_to_tinker

    specs = openai_tools_to_tinker([tool for tool in tools if isinstance(tool, dict)])
    if not specs:
        return messages
    system_prompt = ""
    rest = messages
    if messages and messages[0]["role"] == "system" and isinstance(messages[0]["content"], str):
        system_prompt, rest = messages[0]["content"], messages[1:]
    try:
        prefix = [dict(m) for m in renderer.create_conversation_prefix_with_tools(specs, system_prompt)]
    except NotImplementedError:
        raise EngineError(f"the {type(renderer).__name__} renderer cannot declare tools") from None
    if any("trainable" in m for m in rest):
        for item in prefix:
            item["trainable"] = False
    return prefix + rest


def to_datum(
    messages: Sequence[Message],
    renderer: Any,
    *,
    train_on: str | Any = DEFAULT_TRAIN_ON,
    max_length: int | None = None,
    reduction: Reduction = "mean",
    allow_untrained: bool = False,
    tools: Sequence[Any] | None = None,
) -> tinker.Datum:
    """One conversation -> one `tinker.Datum` (cookbook `conversation_to_datum`).

    `tools` are the row's OpenAI tool definitions (declared with `tool_prefix`). Messages with `weight` or
    `trainable` switch the row to TrainOnWhat.CUSTOMIZED with per-message flags (`trained_flags`).
    A datum with no trained token is an error, unless `allow_untrained` (the readiness check reports it itself)."""
    from tinker_cookbook.renderers import TrainOnWhat
    from tinker_cookbook.supervised.data import conversation_to_datum

    if not messages:
        raise EngineError("cannot render an empty conversation")
    what = train_on_what(train_on)
    conversation = tool_prefix(tools, cookbook_messages(messages, what), renderer)
    if has_training_flags(messages):
        what = TrainOnWhat.CUSTOMIZED
    datum = conversation_to_datum(
        conversation, renderer, max_length=max_length, train_on_what=what, reduction=reduction
    )
    if not allow_untrained and not any(w > 0 for w in datum.loss_fn_inputs["weights"].tolist()):
        raise EngineError(
            f"the conversation has no tokens to train on with train_on={what.value!r} "
            f"(no assistant message, every one has weight 0, or it was truncated away by max_length={max_length})"
        )
    return datum


def to_datums(
    conversations: Iterable[Sequence[Message]],
    renderer: Any,
    *,
    train_on: str | Any = DEFAULT_TRAIN_ON,
    max_length: int | None = None,
    reduction: Reduction = "mean",
) -> list[tinker.Datum]:
    """Many conversations -> datums; an error names the 1-based index of the bad conversation."""
    out = []
    for index, messages in enumerate(conversations, start=1):
        try:
            out.append(
                to_datum(messages, renderer, train_on=train_on, max_length=max_length, reduction=reduction)
            )
        except EngineError as exc:
            raise EngineError(f"conversation {index}: {exc}") from None
    return out


def prompt_tokens(
    messages: Sequence[Message], renderer: Any, tools: Sequence[Any] | None = None
) -> list[int]:
    """The generation prompt for the assistant's next turn (what a sampler is fed)."""
    conversation = tool_prefix(tools, cookbook_messages(messages), renderer)
    return list(renderer.build_generation_prompt(conversation).to_ints())


def datum_tokens(datum: tinker.Datum) -> tuple[list[int], list[int], list[float]]:
    """(input tokens, target tokens, weights) of a datum, as plain lists."""
    inputs = list(datum.model_input.to_ints())
    targets = [int(t) for t in datum.loss_fn_inputs["target_tokens"].tolist()]
    weights = [float(w) for w in datum.loss_fn_inputs["weights"].tolist()]
    if not (len(inputs) == len(targets) == len(weights)):
        raise EngineError(
            f"malformed datum: {len(inputs)} input tokens, {len(targets)} targets, {len(weights)} weights"
        )
    return inputs, targets, weights


def token_counts(datum: tinker.Datum) -> TokenCounts:
    _, _, weights = datum_tokens(datum)
    return TokenCounts(tokens=len(weights), trained=sum(1 for w in weights if w > 0))


def count_tokens(datums: Iterable[tinker.Datum]) -> TokenCounts:
    total = trained = 0
    for datum in datums:
        counts = token_counts(datum)
        total += counts.tokens
        trained += counts.trained
    return TokenCounts(tokens=total, trained=trained)


def token_weighted(datums: Sequence[tinker.Datum]) -> list[tinker.Datum]:
    """0/1-weighted datums (reduction "none") reweighted so every trained token of the set weighs the same and the
    weights sum to the number of datums, as the per-row mean's do. Why: with the per-row mean each token of a
    5-token tag weighs 1/5 and each of a 64-token anchor 1/64, so the anchors barely hold the model's other answers
    (bench/scoped_sweep.py). The local loss is scale-free; Tinker's summed cross-entropy keeps the cookbook's scale.
    """
    import tinker

    trained = count_tokens(datums).trained
    if not trained:
        return list(datums)
    scale = len(datums) / trained
    out = []
    for datum in datums:
        weights = datum.loss_fn_inputs["weights"].to_torch() * scale
        inputs = {**datum.loss_fn_inputs, "weights": tinker.TensorData.from_torch(weights)}
        out.append(tinker.Datum(model_input=datum.model_input, loss_fn_inputs=inputs))
    return out
