"""Google's Gemini API (`models/M:generateContent`, `:streamGenerateContent?alt=sse`) for the scripted endpoint.

Gemini CLI speaks only this API (`GOOGLE_GEMINI_BASE_URL` points it at 127.0.0.1). A request is `contents` (roles
`user` / `model`, `parts` of `text`, `thought`, `functionCall`, `functionResponse`), `systemInstruction` and
`tools[].functionDeclarations` (`parametersJsonSchema` or `parameters`); the answer is `candidates[0].content`, whole
or as SSE chunks of the same shape (a thought part first, as thinking models send, then text and function calls,
`finishReason` and `usageMetadata` on the last chunk). Imported by model_endpoint (a plain module).
"""

from __future__ import annotations

import json
from typing import Any


def is_gemini_path(path: str) -> bool:
    return path.endswith((":generateContent", ":streamGenerateContent"))


def _parts(content: Any) -> list[dict[str, Any]]:
    parts = content.get("parts") if isinstance(content, dict) else None
    return [part for part in parts or [] if isinstance(part, dict)]


def reply_inputs(body: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of `model_endpoint.choose_reply` for a Gemini request."""
    contents = [c for c in body.get("contents") or [] if isinstance(c, dict)]
    last = _parts(contents[-1]) if contents else []
    results = [part["functionResponse"] for part in last if isinstance(part.get("functionResponse"), dict)]
    prompts = [
        c for c in contents if c.get("role") == "user" and not any("functionResponse" in p for p in _parts(c))
    ]
    newest = _parts(prompts[-1]) if prompts else []
    tools = [
        (
            declaration.get("name", ""),
            declaration.get("parametersJsonSchema") or declaration.get("parameters") or {},
        )
        for tool in body.get("tools") or []
        if isinstance(tool, dict)
        for declaration in tool.get("functionDeclarations") or []
        if isinstance(declaration, dict)
    ]
    return {
        "newest_user_text": "\n".join(str(p.get("text", "")) for p in newest if not p.get("thought")),
        "ends_in_tool_result": bool(results),
        "tool_output": "\n".join(json.dumps(result.get("response")) for result in results),
        "tools": tools,
    }


THOUGHT = "Thinking about the request."


def answer_parts(reply: Any) -> list[dict[str, Any]]:
    """The model's parts for a `model_endpoint.Reply`: a thought, then the text and/or the function call(s)."""
    parts: list[dict[str, Any]] = [{"text": THOUGHT, "thought": True}]
    if reply.text:
        parts.append({"text": reply.text})
    for call_id, name, arguments in reply.calls():
        parts.append({"functionCall": {"id": call_id, "name": name, "args": arguments}})
    return parts


def _candidate(parts: list[dict[str, Any]], finish: str | None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return candidate


USAGE = {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}


def whole_answer(reply: Any, model: str) -> dict[str, Any]:
    return {
        "candidates": [_candidate(answer_parts(reply), "STOP")],
        "usageMetadata": USAGE,
        "modelVersion": model,
        "responseId": reply.response_id,
    }


def stream_chunks(reply: Any, model: str) -> list[dict[str, Any]]:
    """One chunk per part; the last also carries finishReason and usage."""
    parts = answer_parts(reply)
    chunks = []
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        chunk: dict[str, Any] = {
            "candidates": [_candidate([part], "STOP" if last else None)],
            "modelVersion": model,
            "responseId": reply.response_id,
        }
        if last:
            chunk["usageMetadata"] = USAGE
        chunks.append(chunk)
    return chunks


def model_of(path: str) -> str:
    """`gemini-2.5-flash` of `/v1beta/models/gemini-2.5-flash:streamGenerateContent`."""
    return path.rsplit("/", 1)[-1].split(":", 1)[0]
