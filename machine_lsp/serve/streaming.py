"""Streamed replies (server-sent events): one loop, `stream`, fed by each API's event builder.

A builder turns the moments of one exchange into its API's events: `start()` before the first token, `text(delta)`
for each piece of plain text, `end(reply)` once the reply is whole (tool calls, finish, usage) and `error(message)`
when generation fails mid-stream. An event is its data and its SSE event name (None: a bare `data:` line). The
events are the SDKs' own stream models (`ChatCompletionChunk`, the Responses stream events, Anthropic's
`Raw*Event`s), dumped by `shapes`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from machine_lsp.core.schema import ToolCall
from machine_lsp.serve import shapes as S
from machine_lsp.serve.protocol import Reply, RequestError, new_id

if TYPE_CHECKING:
    from machine_lsp.serve.exchange import Exchange

DISCONNECTS = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError, asyncio.CancelledError)

Event = tuple[bytes, str | None]


class Events(Protocol):
    def start(self) -> list[Event]: ...
    def text(self, delta: str) -> list[Event]: ...
    def end(self, reply: Reply) -> list[Event]: ...
    def error(self, message: str) -> list[Event]: ...


async def stream(ex: Exchange, request: web.Request) -> web.StreamResponse:
    """Answer `ex` as an event stream in its API's shape; a client that goes away cancels its generation."""
    events = BUILDERS[ex.conv.api](ex)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)

    async def send(batch: list[Event]) -> None:
        for data, name in batch:
            head = f"event: {name}\n".encode() if name else b""
            await response.write(head + b"data: " + data + b"\n\n")

    try:
        await send(events.start())
        async for delta in ex.deltas():
            await send(events.text(delta))
        reply = ex.reply()
        rest = ex.unsent_text(reply)
        if rest:
            await send(events.text(rest))
        ex.note_usage(request, reply)
        await ex.record(reply)  # logged before the last events, as a whole reply is before it is sent
        await send(events.end(reply))
    except DISCONNECTS:
        ex.generation.cancel()
        return response
    except RuntimeError as exc:
        with contextlib.suppress(*DISCONNECTS):
            await send(events.error(str(exc)))
        return response
    with contextlib.suppress(*DISCONNECTS):
        await response.write_eof()
    return response


def _failure(message: str) -> RequestError:
    return RequestError(message, status=500)


# ---------------------------------------------------------------------------------------------------------------
# OpenAI Chat Completions: `chat.completion.chunk`s, then `[DONE]`


class ChatEvents:
    def __init__(self, ex: Exchange) -> None:
        self.response_id = ex.response_id
        self.model = ex.model
        self.include_usage = ex.conv.include_usage

    def _chunk(self, **fields: Any) -> Event:
        return S.chat_chunk(self.response_id, self.model, **fields), None

    def start(self) -> list[Event]:
        return [self._chunk(role=True, text="")]

    def text(self, delta: str) -> list[Event]:
        return [self._chunk(text=delta)]

    def end(self, reply: Reply) -> list[Event]:
        events = [self._chunk(tool_calls=reply.tool_calls)] if reply.tool_calls else []
        events.append(self._chunk(finish=reply.finish))
        if self.include_usage:
            events.append(self._chunk(usage=reply))
        return [*events, (b"[DONE]", None)]

    def error(self, message: str) -> list[Event]:
        return [(S.openai_error(_failure(message), "api_error"), None)]


# ---------------------------------------------------------------------------------------------------------------
# OpenAI Responses: numbered `response.*` events; the message item (index 0) opens with the first text


class ResponsesEvents:
    def __init__(self, ex: Exchange) -> None:
        from openai.types import responses

        self.R = responses
        self.response_id = ex.response_id
        self.model = ex.model
        self.message_id = new_id("msg_")
        self.sequence = 0
        self.message_open = False
        self.streamed = ""

    def _event(self, kind: Any, **fields: Any) -> Event:
        self.sequence += 1
        event = kind(sequence_number=self.sequence, **fields)
        return S.dump(event), event.type

    def _text_event(self, kind: Any, type: str, **fields: Any) -> Event:
        return self._event(
            kind, type=type, item_id=self.message_id, output_index=0, content_index=0, **fields
        )

    def _open_message(self) -> list[Event]:
        R = self.R
        self.message_open = True
        item = R.ResponseOutputMessage(
            id=self.message_id, type="message", role="assistant", status="in_progress", content=[]
        )
        part = R.ResponseOutputText(type="output_text", text="", annotations=[])
        return [
            self._event(
                R.ResponseOutputItemAddedEvent, type="response.output_item.added", item=item, output_index=0
            ),
            self._text_event(R.ResponseContentPartAddedEvent, "response.content_part.added", part=part),
        ]

    def _close_message(self, text: str) -> tuple[Any, list[Event]]:
        R = self.R
        part = R.ResponseOutputText(type="output_text", text=text, annotations=[])
        item = R.ResponseOutputMessage(
            id=self.message_id, type="message", role="assistant", status="completed", content=[part]
        )
        return item, [
            self._text_event(R.ResponseTextDoneEvent, "response.output_text.done", text=text, logprobs=[]),
            self._text_event(R.ResponseContentPartDoneEvent, "response.content_part.done", part=part),
            self._event(
                R.ResponseOutputItemDoneEvent, type="response.output_item.done", item=item, output_index=0
            ),
        ]

    def _tool_call(self, call: ToolCall, index: int) -> tuple[Any, list[Event]]:
        R = self.R
        item_id = new_id("fc_")
        arguments = call.function.arguments
        started = R.ResponseFunctionToolCall(
            id=item_id,
            type="function_call",
            call_id=call.id,
            name=call.function.name,
            arguments="",
            status="in_progress",
        )
        done = started.model_copy(update={"arguments": arguments, "status": "completed"})
        at = {"item_id": item_id, "output_index": index}
        return done, [
            self._event(
                R.ResponseOutputItemAddedEvent,
                type="response.output_item.added",
                item=started,
                output_index=index,
            ),
            self._event(
                R.ResponseFunctionCallArgumentsDeltaEvent,
                type="response.function_call_arguments.delta",
                delta=arguments,
                **at,
            ),
            self._event(
                R.ResponseFunctionCallArgumentsDoneEvent,
                type="response.function_call_arguments.done",
                arguments=arguments,
                **at,
            ),
            self._event(
                R.ResponseOutputItemDoneEvent, type="response.output_item.done", item=done, output_index=index
            ),
        ]

    def start(self) -> list[Event]:
        R = self.R
        start = S.response_object(self.response_id, self.model, status="in_progress", output=[])
        return [
            self._event(R.ResponseCreatedEvent, type="response.created", response=start),
            self._event(R.ResponseInProgressEvent, type="response.in_progress", response=start),
        ]

    def text(self, delta: str) -> list[Event]:
        events = [] if self.message_open else self._open_message()
        self.streamed += delta
        events.append(
            self._text_event(
                self.R.ResponseTextDeltaEvent, "response.output_text.delta", delta=delta, logprobs=[]
            )
        )
        return events

    def end(self, reply: Reply) -> list[Event]:
        R = self.R
        events = self._open_message() if not self.message_open and not reply.tool_calls else []
        output: list[Any] = []
        if self.message_open:
            item, closing = self._close_message(self.streamed if reply.tool_calls else reply.text)
            output.append(item)
            events += closing
        for index, call in enumerate(reply.tool_calls, start=len(output)):
            item, call_events = self._tool_call(call, index)
            output.append(item)
            events += call_events
        status = S.response_status(reply)
        final = S.response_object(self.response_id, self.model, status=status, output=output, reply=reply)
        if status == "completed":
            events.append(self._event(R.ResponseCompletedEvent, type="response.completed", response=final))
        else:
            events.append(self._event(R.ResponseIncompleteEvent, type="response.incomplete", response=final))
        return events

    def error(self, message: str) -> list[Event]:
        return [self._event(self.R.ResponseErrorEvent, type="error", message=message)]


# ---------------------------------------------------------------------------------------------------------------
# Anthropic Messages: `message_start`, content blocks (text at index 0 first), `message_delta`, `message_stop`


class MessagesEvents:
    def __init__(self, ex: Exchange) -> None:
        from anthropic import types

        self.A = types
        self.ex = ex
        self.text_open = False

    @staticmethod
    def _event(event: Any) -> Event:
        return S.dump(event), event.type

    def start(self) -> list[Event]:
        ex = self.ex
        start = S.anthropic_message(None, ex.model, ex.response_id, prompt_tokens=len(ex.generation.prompt))
        return [self._event(self.A.RawMessageStartEvent(type="message_start", message=start))]

    def text(self, delta: str) -> list[Event]:
        A = self.A
        events = []
        if not self.text_open:
            self.text_open = True
            block = A.TextBlock(type="text", text="")
            events.append(
                self._event(
                    A.RawContentBlockStartEvent(type="content_block_start", index=0, content_block=block)
                )
            )
        text = A.TextDelta(type="text_delta", text=delta)
        events.append(
            self._event(A.RawContentBlockDeltaEvent(type="content_block_delta", index=0, delta=text))
        )
        return events

    def _tool_use(self, call: ToolCall, index: int) -> list[Event]:
        A = self.A
        block = A.ToolUseBlock(type="tool_use", id=call.id, name=call.function.name, input={})
        arguments = A.InputJSONDelta(type="input_json_delta", partial_json=call.function.arguments)
        return [
            self._event(
                A.RawContentBlockStartEvent(type="content_block_start", index=index, content_block=block)
            ),
            self._event(
                A.RawContentBlockDeltaEvent(type="content_block_delta", index=index, delta=arguments)
            ),
            self._event(A.RawContentBlockStopEvent(type="content_block_stop", index=index)),
        ]

    def end(self, reply: Reply) -> list[Event]:
        from anthropic.types.raw_message_delta_event import Delta

        A = self.A
        events = self.text("") if not self.text_open and not reply.tool_calls else []
        if self.text_open:
            events.append(self._event(A.RawContentBlockStopEvent(type="content_block_stop", index=0)))
        for index, call in enumerate(reply.tool_calls, start=1 if self.text_open else 0):
            events += self._tool_use(call, index)
        finish = A.RawMessageDeltaEvent(
            type="message_delta",
            delta=Delta(stop_reason=S.STOP_REASONS[reply.finish], stop_sequence=None),
            usage=A.MessageDeltaUsage(output_tokens=reply.completion_tokens),
        )
        return [*events, self._event(finish), self._event(A.RawMessageStopEvent(type="message_stop"))]

    def error(self, message: str) -> list[Event]:
        return [(S.anthropic_error(_failure(message), "api_error"), "error")]


BUILDERS: dict[str, Callable[[Exchange], Events]] = {
    "chat.completions": ChatEvents,
    "responses": ResponsesEvents,
    "messages": MessagesEvents,
}
