"""A parsed `Reply` -> each API's response bodies, stream chunks and error bodies, built from the SDKs' response
models (`ChatCompletion`, `ChatCompletionChunk`, `Response`, `anthropic.types.Message`, the error types); nothing
here is a hand-written wire dict. The stream events themselves are put together in `streaming`.
"""

from __future__ import annotations

import json
import time
from typing import Any

from machine_lsp.core.schema import ToolCall
from machine_lsp.serve.protocol import Reply, RequestError, new_id

# ---------------------------------------------------------------------------------------------------------------
# Responses: OpenAI Chat Completions


def dump(model: Any) -> bytes:
    """An SDK model as the wire JSON: the fields that are set."""
    return model.model_dump_json(exclude_none=True).encode()


def chat_completion(reply: Reply, model: str, response_id: str) -> bytes:
    from openai.types.chat import ChatCompletion, ChatCompletionMessage, ChatCompletionMessageFunctionToolCall
    from openai.types.chat.chat_completion import Choice
    from openai.types.completion_usage import CompletionUsage

    calls = [
        ChatCompletionMessageFunctionToolCall(
            id=c.id, type="function", function={"name": c.function.name, "arguments": c.function.arguments}
        )
        for c in reply.tool_calls
    ]
    message = ChatCompletionMessage(role="assistant", content=reply.text or None, tool_calls=calls or None)
    return dump(
        ChatCompletion(
            id=response_id,
            object="chat.completion",
            created=int(time.time()),
            model=model,
            choices=[Choice(index=0, message=message, finish_reason=reply.finish)],
            usage=CompletionUsage(
                prompt_tokens=reply.prompt_tokens,
                completion_tokens=reply.completion_tokens,
                total_tokens=reply.prompt_tokens + reply.completion_tokens,
            ),
        )
    )


def chat_chunk(
    response_id: str,
    model: str,
    *,
    role: bool = False,
    text: str | None = None,
    tool_calls: list[ToolCall] | None = None,
    finish: str | None = None,
    usage: Reply | None = None,
) -> bytes:
    from openai.types.chat import ChatCompletionChunk
    from openai.types.chat.chat_completion_chunk import Choice, ChoiceDelta, ChoiceDeltaToolCall
    from openai.types.completion_usage import CompletionUsage

    choices = []
    if usage is None:
        delta = ChoiceDelta(
            role="assistant" if role else None,
            content=text,
            tool_calls=[
                ChoiceDeltaToolCall(
                    index=i,
                    id=c.id,
                    type="function",
                    function={"name": c.function.name, "arguments": c.function.arguments},
                )
                for i, c in enumerate(tool_calls or [])
            ]
            or None,
        )
        choices = [Choice(index=0, delta=delta, finish_reason=finish)]
    chunk = ChatCompletionChunk(
        id=response_id,
        object="chat.completion.chunk",
        created=int(time.time()),
        model=model,
        choices=choices,
        usage=CompletionUsage(
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            total_tokens=usage.prompt_tokens + usage.completion_tokens,
        )
        if usage is not None
        else None,
    )
    return dump(chunk)


def openai_error(error: RequestError, kind: str = "invalid_request_error") -> bytes:
    from openai.types import ErrorObject

    return (
        b'{"error":'
        + dump(ErrorObject(message=error.message, type=kind, param=error.param, code=error.code))
        + b"}"
    )


# ---------------------------------------------------------------------------------------------------------------
# Responses: OpenAI Responses


def response_object(
    response_id: str,
    model: str,
    *,
    status: str,
    output: list[Any],
    reply: Reply | None = None,
    max_output_tokens: int | None = None,
) -> Any:
    from openai.types.responses import Response, ResponseUsage
    from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

    usage = None
    if reply is not None:
        usage = ResponseUsage(
            input_tokens=reply.prompt_tokens,
            input_tokens_details=InputTokensDetails(cached_tokens=0, cache_write_tokens=0),
            output_tokens=reply.completion_tokens,
            output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
            total_tokens=reply.prompt_tokens + reply.completion_tokens,
        )
    incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
    return Response(
        id=response_id,
        object="response",
        created_at=time.time(),
        model=model,
        status=status,
        output=output,
        parallel_tool_calls=True,
        tool_choice="auto",
        tools=[],
        usage=usage,
        incomplete_details=incomplete,
        max_output_tokens=max_output_tokens,
    )


def response_output(reply: Reply, message_id: str) -> list[Any]:
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    output: list[Any] = []
    if reply.text or not reply.tool_calls:
        output.append(
            ResponseOutputMessage(
                id=message_id,
                type="message",
                role="assistant",
                status="completed" if reply.finish != "length" else "incomplete",
                content=[ResponseOutputText(type="output_text", text=reply.text, annotations=[])],
            )
        )
    for call in reply.tool_calls:
        output.append(
            ResponseFunctionToolCall(
                id=new_id("fc_"),
                type="function_call",
                call_id=call.id,
                name=call.function.name,
                arguments=call.function.arguments,
                status="completed",
            )
        )
    return output


def response_status(reply: Reply) -> str:
    return "incomplete" if reply.finish == "length" else "completed"


# ---------------------------------------------------------------------------------------------------------------
# Responses: Anthropic Messages


STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _tool_input(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"value": value}


def anthropic_blocks(reply: Reply) -> list[Any]:
    from anthropic.types import TextBlock, ToolUseBlock

    blocks: list[Any] = []
    if reply.text or not reply.tool_calls:
        blocks.append(TextBlock(type="text", text=reply.text))
    for call in reply.tool_calls:
        blocks.append(
            ToolUseBlock(
                type="tool_use",
                id=call.id,
                name=call.function.name,
                input=_tool_input(call.function.arguments),
            )
        )
    return blocks


def anthropic_message(reply: Reply | None, model: str, message_id: str, prompt_tokens: int = 0) -> Any:
    from anthropic.types import Message as AnthropicMessage
    from anthropic.types import Usage

    return AnthropicMessage(
        id=message_id,
        type="message",
        role="assistant",
        model=model,
        content=anthropic_blocks(reply) if reply is not None else [],
        stop_reason=STOP_REASONS[reply.finish] if reply is not None else None,
        stop_sequence=None,
        usage=Usage(
            input_tokens=reply.prompt_tokens if reply is not None else prompt_tokens,
            output_tokens=reply.completion_tokens if reply is not None else 0,
        ),
    )


def anthropic_error(error: RequestError, kind: str = "invalid_request_error") -> bytes:
    from anthropic.types import ErrorResponse

    return dump(
        ErrorResponse.model_validate({"type": "error", "error": {"type": kind, "message": error.message}})
    )
