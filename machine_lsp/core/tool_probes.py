"""The built-in tool-retention probe (pure data): requests an agent answers with a tool call, with OpenAI `tools`.

The gate samples the reference (the promoted checkpoint, else the base model) and the new checkpoint on each and
counts the probes where the reference calls a tool and the new one still does. Measured on the embedded
SmolLM2-135M-Instruct through the qwen3_instruct renderer (docs/TRAINING.md): the base model calls no tool on any of
these (it answers in prose or writes Python), so against the base the retention is "not measurable"; it becomes a
real bound once a promoted checkpoint (trained on the project's agent turns) calls tools.
"""

from __future__ import annotations

from typing import Any

from machine_lsp.core.schema import Message


def _tool(name: str, description: str, argument: str, what: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {argument: {"type": "string", "description": what}},
                "required": [argument],
            },
        },
    }


READ_FILE = _tool("read_file", "Read a file from the workspace and return its text.", "path", "file path")
LIST_FILES = _tool("list_files", "List the files in a directory of the workspace.", "path", "directory")
RUN_SHELL = _tool(
    "run_shell", "Run a shell command in the workspace and return its output.", "command", "command"
)
WEATHER = _tool("get_weather", "Get the current weather for a city.", "city", "city name")

TOOL_PROBES: tuple[tuple[tuple[dict[str, Any], ...], str], ...] = (
    ((READ_FILE, LIST_FILES), "Read the file README.md and tell me what it says."),
    ((READ_FILE, LIST_FILES), "List the files in the src directory."),
    ((RUN_SHELL,), "Run the command `ls -la` and show me the output."),
    ((WEATHER,), "What is the weather in Paris right now?"),
    ((READ_FILE,), "Open setup.py and show me its contents."),
    ((LIST_FILES, RUN_SHELL), "Which files are in the current directory?"),
    ((RUN_SHELL,), "Run the tests with pytest."),
    ((WEATHER,), "Get the weather for Tokyo."),
    ((READ_FILE, RUN_SHELL), "Show me the contents of config.toml."),
    ((LIST_FILES,), "List the files in the docs folder."),
)


def probe_conversations() -> list[tuple[list[Message], list[dict[str, Any]]]]:
    """(messages, tools) of every built-in tool probe."""
    return [([Message(role="user", content=question)], list(tools)) for tools, question in TOOL_PROBES]
