"""Pi logs are read in linear time and memory (issue 9: 20,000 exchanges took 15.7 s and 3.3 GB before)."""

from __future__ import annotations

import gc
import tracemalloc

import msgspec

from machine_lsp.core.schema import text_of
from machine_lsp.core.transcripts import load_turns, turn_at


def pi_log(exchanges: int, *, tool_every: int = 0) -> str:
    """A v3 Pi session of `exchanges` user/assistant pairs in one chain (every `tool_every`-th with a tool call)."""
    lines = [{"type": "session", "version": 3, "id": "s", "timestamp": "2026-11-30T00:00:00Z", "cwd": "/p"}]
    parent: str | None = None

    def add(entry_id: str, message: dict) -> None:
        nonlocal parent
        lines.append(
            {"type": "message", "id": entry_id, "parentId": parent, "timestamp": "t", "message": message}
        )
        parent = entry_id

    for i in range(exchanges):
        add(f"u{i}", {"role": "user", "content": f"question {i}"})
        if tool_every and i % tool_every == 0:
            call = {"type": "toolCall", "id": f"c{i}", "name": "bash", "arguments": {"command": "echo hi"}}
            add(f"t{i}", {"role": "assistant", "content": [call], "stopReason": "toolUse"})
            add(f"r{i}", {"role": "toolResult", "toolCallId": f"c{i}", "toolName": "bash",
                          "content": [{"type": "text", "text": "hi"}], "isError": False})  # fmt: skip
        add(f"a{i}", {"role": "assistant", "content": [{"type": "text", "text": f"answer {i}"}],
                      "stopReason": "stop", "model": "m", "provider": "p"})  # fmt: skip
    return "\n".join(msgspec.json.encode(line).decode() for line in lines) + "\n"


def peak_bytes(text: str, **options: bool) -> tuple[int, object]:
    gc.collect()
    tracemalloc.start()
    turns = load_turns(text, "file:///pi.jsonl", **options)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak, turns


def test_20k_exchanges_read_in_linear_memory_and_the_last_turn_is_whole() -> None:
    small, large = pi_log(2_000, tool_every=7), pi_log(20_000, tool_every=7)
    small_peak, _ = peak_bytes(small)
    large_peak, turns = peak_bytes(large)
    # 10x the exchanges: linear cost is ~10x; the quadratic reader this replaces was ~100x. 20x is generous room.
    assert large_peak < 20 * small_peak, (small_peak, large_peak)
    assert len(turns) == 20_000
    last = turn_at(turns, None)
    assert len(last.messages) == 40_000 and last.answer_index == 39_999
    assert text_of(last.messages[-1]) == "answer 19999" and text_of(last.messages[0]) == "question 0"
    assert [text_of(m) for m in last.messages[-4:]] == [
        "question 19998",
        "answer 19998",
        "question 19999",
        "answer 19999",
    ]


def test_trace_turns_of_a_long_log_share_their_prefixes() -> None:
    turns = load_turns(pi_log(2_000, tool_every=3), "file:///pi.jsonl", trace=True)
    assert len(turns) == 2_000 + 667  # every step is a turn with --trace
    middle = turn_at(turns, None)
    roles = [m.role for m in middle.messages[:5]]
    assert roles == ["user", "assistant", "tool", "assistant", "user"]  # exchange 0 called a tool
    assert middle.messages[1].tool_calls is not None and middle.messages[2].tool_call_id == "c0"


def test_a_shared_conversation_reads_like_a_list() -> None:
    turns = load_turns(pi_log(3), "file:///pi.jsonl")
    first, last = turns[0], turns[-1]
    assert first.messages == [first.messages[0], first.messages[1]] and len(first.messages) == 2
    assert last.messages[:2] == list(first.messages)  # slices are plain lists
    assert [text_of(m) for m in last.messages][-1] == "answer 2"
    assert last.messages[-6] == last.messages[0]
