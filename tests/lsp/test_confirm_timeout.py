"""A job's Run/Cancel question that nobody answers: the server declines the job after `confirmTimeoutS` and says
so (window/showMessage, the reply's message, a log line), instead of giving up silently."""

from __future__ import annotations

import json

from raw_client import WAIT, RawClient, frame

ROW = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}


def test_unanswered_confirmation_is_declined_with_a_reason(tmp_path):
    (tmp_path / ".machine").mkdir()
    (tmp_path / "train.jsonl").write_text((json.dumps(ROW) + "\n") * 2)
    client = RawClient(tmp_path)
    try:
        client.initialize({"machine": {"debounceMs": 10, "confirmTimeoutS": 0.5}})
        msg_id = client.request(
            "workspace/executeCommand",
            {"command": "machine.train.run", "arguments": [{"data": "train.jsonl"}]},
        )
        asked, shown, reply = [], [], None
        while reply is None:  # read everything; answer every server request except the question
            message = client.messages.get(timeout=WAIT)
            method = message.get("method")
            if method == "window/showMessageRequest":
                asked.append(message["params"]["message"])  # left unanswered on purpose
            elif method is not None and "id" in message:
                client.send_bytes(frame({"jsonrpc": "2.0", "id": message["id"], "result": None}))
            elif method == "window/showMessage":
                shown.append(message["params"])
            elif message.get("id") == msg_id:
                reply = message
    finally:
        client.close()
    assert len(asked) == 1 and "start the training run?" in asked[0]
    why = "Training run not started: no answer to Run/Cancel within 0.5 s"
    assert reply["result"] == {"status": "declined", "message": why}
    assert [m["message"] for m in shown if m["type"] == 2] == [why]  # a warning the user sees
    assert f"machine-lsp WARNING {why}" in client.stderr()  # and the log says the same
    assert not list((tmp_path / ".machine").glob("runs/*"))  # nothing ran


def test_confirm_timeout_setting_is_checked():
    from machine_lsp.lsp.settings import Settings

    settings, problems = Settings().parse({"confirmTimeoutS": 0})
    assert settings.confirm_timeout_s == 600 and problems and "confirmTimeoutS" in problems[0]
    assert Settings().parse({"machine": {"confirmTimeoutS": 2.5}})[0].confirm_timeout_s == 2.5
