import assert from "node:assert/strict";
import { test } from "node:test";
import type { DataReply, JobSummary, JobsListReply, WroteReply } from "../../src/generated/replies";
import { cancellableJobs, dataPathText, isJob, labelServerMessage, scaffoldFileToOpen, serverShownError } from "../../src/logic/replies";

test("Scaffold SFT Script opens the script the server wrote (the `written` list)", () => {
  const reply: WroteReply = { written: ["/ws/machine.toml", "/ws/train_sft.py"], message: "wrote machine.toml, train_sft.py · next: …" };
  assert.equal(scaffoldFileToOpen(reply), "/ws/train_sft.py");
  assert.equal(scaffoldFileToOpen({ written: ["/ws/machine.toml"], message: "" }), "/ws/machine.toml");
  assert.equal(scaffoldFileToOpen({ written: [], message: "" }), undefined);
});

test("Show Data Path names the store and every count", () => {
  const reply: DataReply = { store: "/ws/.machine/tagged.jsonl", counts: { good: 2, bad: 1, rewritten: 0, traced: 0, total: 3 }, warnings: [] };
  assert.equal(dataPathText(reply), "Machine data: /ws/.machine/tagged.jsonl (good 2, bad 1, rewritten 0, traced 0, total 3)");
  assert.match(dataPathText({ ...reply, warnings: ["torn line 4 moved aside"] }), / · 1 warning: torn line 4 moved aside$/);
});

const job: JobSummary = {
  job_id: "a1b2c3d4", verb: "train-run", status: "running", message: "", run_id: null, run_dir: null, result: null,
  pid: 42, started: 1, ended: null, last_event: null,
};

test("a declined run is not a job; running jobs can be cancelled", () => {
  assert.equal(isJob(job), true);
  assert.equal(isJob({ status: "declined", message: "Training run not started" }), false);
  const listing: JobsListReply = { jobs: [job, { ...job, job_id: "ff", status: "done" }], runs: [{ run_dir: "/ws/.machine/runs/x", id: "x" }] };
  assert.deepEqual(cancellableJobs(listing), [{ id: "a1b2c3d4", label: "train-run" }]);
});

test("an error reply the server has shown already is recognised (shown once, never twice)", () => {
  const shown = { code: -32602, message: "line must be a 1-based line number", data: { shown: true } };
  assert.equal(serverShownError(shown), "line must be a 1-based line number");
  assert.equal(serverShownError({ code: -32603, message: "boom", data: { traceback: ["…"] } }), undefined);
  assert.equal(serverShownError(new Error("the machine-lsp server is not running")), undefined);
  assert.equal(serverShownError(undefined), undefined);
});

test("a server message gets one Machine: label (the server's own machine: label is not doubled)", () => {
  assert.equal(
    labelServerMessage("machine: Baseline evaluation not started: no eval data"),
    "Machine: Baseline evaluation not started: no eval data",
  );
  assert.equal(labelServerMessage("Tagged good: chat.jsonl:1 · store 1 good / 0 bad"), "Machine: Tagged good: chat.jsonl:1 · store 1 good / 0 bad");
  assert.equal(labelServerMessage("Machine: already labelled"), "Machine: already labelled");
  assert.equal(labelServerMessage("machinery stopped"), "Machine: machinery stopped");
});
