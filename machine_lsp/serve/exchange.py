"""One request being answered (`Exchange`): the generation's tokens turned into safe text deltas, the final reply,
its row in the served log, and the whole answer in its API's shape; `streaming` sends the same exchange as events.

The server hands each exchange itself (`Answering`: its tokenizer and renderer, the served log, whether it is closing)
and sends errors through `error_response`, the one place an error becomes an API's error body.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from aiohttp import web

from machine_lsp.core.schema import Message
from machine_lsp.serve import protocol as P
from machine_lsp.serve import shapes as S
from machine_lsp.serve.generation import Generation
from machine_lsp.serve.served_log import ServedLog, ServedRow, now_iso, usage

USAGE_KEY = web.RequestKey("machine.usage", tuple)  # (prompt, completion) tokens, for the request's log line


class _Settings(Protocol):
    """What an exchange reads of the server's settings (`server.ServeSettings`)."""

    @property
    def model_name(self) -> str: ...
    @property
    def log(self) -> ServedLog | None: ...


class Answering(Protocol):
    """What an exchange uses of the server answering it (`server.Server`)."""

    tokenizer: Any
    renderer: Any
    end_token: int | None
    served: int  # answers recorded so far
    closing: bool

    @property
    def settings(self) -> _Settings: ...


def error_response(api: P.Api, error: P.RequestError, kind: str = "invalid_request_error") -> web.Response:
    """`error` answered in the API's own error shape (Anthropic's for `messages`, OpenAI's for the others)."""
    body = S.anthropic_error(error, kind) if api == "messages" else S.openai_error(error, kind)
    return web.Response(body=body, status=error.status, content_type="application/json")


class Exchange:
    """One request being answered: turns the generation's tokens into text deltas and the final reply."""

    def __init__(
        self,
        server: Answering,
        conv: P.Conversation,
        messages: list[Message],
        generation: Generation,
        checkpoint: str,
    ) -> None:
        self.server = server
        self.checkpoint = checkpoint  # the one answering: the slot this request was submitted to
        self.conv = conv
        self.messages = messages
        self.generation = generation
        self.model = server.settings.model_name
        self.response_id = P.new_id(
            {"chat.completions": "chatcmpl-", "responses": "resp_", "messages": "msg_"}[conv.api]
        )
        self.text = ""
        self.sent = 0
        self.stopped = False

    async def deltas(self) -> Any:
        """Yield text that is safe to show now (never part of a tool-call block)."""
        tokenizer = self.server.tokenizer
        async for _ in self.generation.stream():
            self.text = tokenizer.decode(self.generation.tokens, skip_special_tokens=False)
            for stop in self.conv.stop:
                at = self.text.find(stop, max(0, self.sent - len(stop)))
                if stop and at >= 0:
                    self.text = self.text[:at]
                    self.stopped = True
            if self.stopped:
                self.generation.cancel()
            safe = P.streamable_prefix(self.text)
            if safe > self.sent:
                yield self.text[self.sent : safe]
                self.sent = safe
            if self.stopped:
                break
        if self.generation.finish_reason in (None, "cancelled") and not self.stopped:
            raise asyncio.CancelledError  # the client went away: nothing to answer, nothing to log

    def reply(self) -> P.Reply:
        generation = self.generation
        if generation.finish_reason == "error":
            raise RuntimeError(generation.error or "generation failed")
        finished = generation.finish_reason == "stop" or self.stopped
        if self.stopped:
            text, calls = self.text, []
        else:
            text, calls = P.parse_reply(
                generation.tokens, self.server.renderer, self.server.end_token, finished
            )
        finish = "tool_calls" if calls else ("stop" if finished else "length")
        return P.Reply(
            text=text,
            tool_calls=calls,
            finish=finish,
            prompt_tokens=len(generation.prompt),
            completion_tokens=len(generation.tokens),
        )

    def unsent_text(self, reply: P.Reply) -> str:
        """Text still to stream once the reply is whole (none when it ended in tool calls)."""
        if reply.tool_calls:
            return ""
        return reply.text[self.sent :] if reply.text.startswith(self.text[: self.sent]) else ""

    def note_usage(self, request: web.Request, reply: P.Reply) -> None:
        request[USAGE_KEY] = (reply.prompt_tokens, reply.completion_tokens)

    async def record(self, reply: P.Reply) -> None:
        log = self.server.settings.log
        self.server.served += 1
        if log is None:
            return
        answer = Message(role="assistant", content=reply.text, tool_calls=reply.tool_calls or None)
        row = ServedRow(
            messages=[*self.messages, answer],
            model=self.model,
            checkpoint=self.checkpoint,
            time=now_iso(),
            api=self.conv.api,
            finish_reason=reply.finish,
            usage=usage(reply.prompt_tokens, reply.completion_tokens),
        )
        await asyncio.get_running_loop().run_in_executor(None, log.append, row)

    async def whole(self, request: web.Request) -> web.Response:
        async for _ in self.deltas():
            pass
        try:
            reply = self.reply()
        except RuntimeError as exc:
            status = 503 if self.server.closing else 500
            return error_response(self.conv.api, P.RequestError(str(exc), status=status), "api_error")
        self.note_usage(request, reply)
        await self.record(reply)
        api = self.conv.api
        if api == "chat.completions":
            body = S.chat_completion(reply, self.model, self.response_id)
        elif api == "responses":
            output = S.response_output(reply, P.new_id("msg_"))
            body = S.dump(
                S.response_object(
                    self.response_id, self.model, status=S.response_status(reply), output=output, reply=reply
                )
            )
        else:
            body = S.dump(S.anthropic_message(reply, self.model, self.response_id))
        return web.Response(body=body, content_type="application/json")
