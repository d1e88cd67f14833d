import assert from "node:assert/strict";
import { test } from "node:test";
import { evalSetArgs, existingEvalFile } from "../../src/logic/evalSet";

test("the eval file the settings name goes to machine.eval.split workspace-relative; none: the server chooses", () => {
  assert.deepEqual(evalSetArgs("", "/ws"), { quiet: true });
  assert.deepEqual(evalSetArgs("data/eval.jsonl", "/ws"), { quiet: true, out: "data/eval.jsonl" });
  assert.deepEqual(evalSetArgs("/ws/held/eval.jsonl", "/ws", true), { quiet: true, out: "held/eval.jsonl", force: true });
  assert.deepEqual(evalSetArgs("/elsewhere/eval.jsonl", "/ws"), { quiet: true, out: "/elsewhere/eval.jsonl" });
});

test("an existing eval file is recognised in the server's refusal; other errors are not", () => {
  assert.equal(existingEvalFile("eval.jsonl already exists; --force (force: true) replaces it with a new split"), "eval.jsonl");
  assert.equal(existingEvalFile("machine: data/eval.jsonl already exists; --force (force: true) replaces it"), "data/eval.jsonl");
  assert.equal(existingEvalFile("no eval set made: 5 rows are too few for a held-out split"), undefined);
});

