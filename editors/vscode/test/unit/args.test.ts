import assert from "node:assert/strict";
import { test } from "node:test";
import { answerAsk, cancelArgs, checkpointsFromManifest, compareArgs, jobArgs, PREFERENCE_OBJECTIVES, preferenceArgs, resolvePath, retagAskKind, scaffoldArgs, selectionArgs, SERVER_COMMANDS, tagArgs, tagAskKind, tagOffersNote, validateArgs, withOfferedNote } from "../../src/logic/args";
import { DEFAULT_SETTINGS } from "../../src/logic/settings";

test("tag: 0-based editor line becomes the 1-based line the server counts", () => {
  assert.deepEqual(tagArgs({ uri: "file:///w/a.jsonl", line: 0, verdict: "good" }), { uri: "file:///w/a.jsonl", line: 1, verdict: "good" });
});

test("tag with note, rewrite and trace", () => {
  assert.deepEqual(tagArgs({ uri: "u", line: 9, verdict: "good", note: "  concise ", rewrite: "answer: 4", trace: true }), {
    uri: "u",
    line: 10,
    verdict: "good",
    note: "concise",
    rewrite: "answer: 4",
    trace: true,
  });
  assert.deepEqual(tagArgs({ uri: "u", line: 1, verdict: "bad", note: "   " }), { uri: "u", line: 2, verdict: "bad" });
  assert.throws(() => tagArgs({ uri: "u", line: 1, verdict: "good", rewrite: "  " }), /rewrite is empty/);
});

test("selection: the range goes as LSP positions, the prompt comes from the user", () => {
  const range = { start: { line: 4, character: 2 }, end: { line: 6, character: 0 } };
  const got = selectionArgs({ uri: "file:///w/x.py", range, text: "def f(): ...", prompt: "write f", verdict: "good", note: " n " });
  assert.deepEqual(got, { uri: "file:///w/x.py", verdict: "good", prompt: "write f", range, note: "n" });
  assert.notEqual(got.range, range, "a copy, not the editor's object");
  assert.throws(() => selectionArgs({ uri: "u", range, text: " \n", prompt: "p", verdict: "good" }), /Select the assistant answer/);
  assert.throws(() => selectionArgs({ uri: "u", range, text: "x", prompt: " ", verdict: "bad" }), /prompt is empty/);
});

test("resolvePath: relative to the workspace folder, absolute untouched, empty is the server default", () => {
  assert.equal(resolvePath("data/t.jsonl", "/ws"), "/ws/data/t.jsonl");
  assert.equal(resolvePath("/abs/t.jsonl", "/ws"), "/abs/t.jsonl");
  assert.equal(resolvePath("", "/ws"), undefined);
  assert.equal(resolvePath("t.jsonl", undefined), "t.jsonl");
});

test("job arguments per verb: only what the user set, with the jobs' key names", () => {
  const settings = { ...DEFAULT_SETTINGS, engine: "tinker" as const, baseModel: "Qwen/Qwen3-8B", trainPath: "data/train.jsonl", evalPath: "data/eval.jsonl", threads: 1 };
  const ws = "/ws";
  const common = { engine: "tinker", model: "Qwen/Qwen3-8B", threads: 1 };
  assert.deepEqual(jobArgs({ kind: "smoke", settings, workspaceFolder: ws }), { ...common, data: "/ws/data/train.jsonl" });
  assert.deepEqual(jobArgs({ kind: "train", settings, workspaceFolder: ws }), { ...common, data: "/ws/data/train.jsonl" });
  // retrain always trains on the store (its job takes no data argument)
  assert.deepEqual(jobArgs({ kind: "retrain", settings, workspaceFolder: ws }), { ...common });
  assert.deepEqual(jobArgs({ kind: "baseline", settings, workspaceFolder: ws }), { ...common, data: "/ws/data/eval.jsonl" });
  assert.deepEqual(jobArgs({ kind: "evalCheckpoint", settings, workspaceFolder: ws, checkpoint: " local://r1/step-10 " }), {
    ...common,
    data: "/ws/data/eval.jsonl",
    checkpoint: "local://r1/step-10",
  });
  assert.deepEqual(jobArgs({ kind: "probe", settings, checkpoint: "local://r1/final" }), { ...common, checkpoint: "local://r1/final" });
  assert.throws(() => jobArgs({ kind: "probe", settings: DEFAULT_SETTINGS }), /Pick a checkpoint/);
});

test("job arguments: nothing set → empty (machine.toml decides); confirmation off → yes", () => {
  assert.deepEqual(jobArgs({ kind: "smoke", settings: DEFAULT_SETTINGS }), {});
  assert.deepEqual(jobArgs({ kind: "train", settings: { ...DEFAULT_SETTINGS, confirmPaidRuns: false } }), { yes: true });
});

test("validate, compare and cancel arguments", () => {
  assert.deepEqual(validateArgs("file:///a.jsonl"), { uri: "file:///a.jsonl" });
  assert.deepEqual(validateArgs("file:///a.jsonl", "file:///e.jsonl"), { uri: "file:///a.jsonl", eval_uri: "file:///e.jsonl" });
  // the buffer, not the file: an untitled document has no file at all
  assert.deepEqual(validateArgs("untitled:Untitled-1", undefined, '{"messages": []}\n'), { uri: "untitled:Untitled-1", text: '{"messages": []}\n' });
  assert.deepEqual(compareArgs("/r/base.json", "/r/ft.json"), { a: "/r/base.json", b: "/r/ft.json" });
  assert.throws(() => compareArgs("/r/a.json", "/r/a.json"), /two different/);
  assert.deepEqual(cancelArgs("j7"), { job_id: "j7" });
});

test("the command ids are the server's machine.* verbs", () => {
  for (const id of Object.values(SERVER_COMMANDS)) assert.match(id, /^machine\.[a-z.]+$/);
  assert.equal(SERVER_COMMANDS.train, "machine.train.run");
  assert.equal(SERVER_COMMANDS.scaffold, "machine.train.sft");
});

test("checkpoints from a run manifest, tolerant of junk", () => {
  const got = checkpointsFromManifest("run-1", {
    engine: "local",
    created_at: "2026-11-30T10:00:00Z",
    checkpoints: [{ name: "step-10", address: "local://run-1/step-10", step: 10 }, { name: "no-address" }, 7, { address: "local://run-1/final" }],
  });
  assert.deepEqual(
    got.map((c) => [c.label, c.address, c.description]),
    [
      ["run-1 / step-10", "local://run-1/step-10", "local · 2026-11-30T10:00:00Z · step 10"],
      ["run-1 / local://run-1/final", "local://run-1/final", "local · 2026-11-30T10:00:00Z"],
    ],
  );
  assert.deepEqual(checkpointsFromManifest("r", null), []);
  assert.deepEqual(checkpointsFromManifest("r", { checkpoints: "nope" }), []);
});

test("code actions that need an answer are recognised; the answer fills the argument", () => {
  assert.equal(tagAskKind("machine.tag", [{ uri: "u", line: 3, verdict: "good", ask: "note" }]), "note");
  assert.equal(tagAskKind("machine.tag", [{ uri: "u", line: 3, verdict: "good", ask: "rewrite" }]), "rewrite");
  assert.equal(tagAskKind("machine.tag", [{ uri: "u", range: {}, verdict: "bad", ask: "prompt" }]), "prompt");
  assert.equal(tagAskKind("machine.tag", [{ uri: "u", line: 3, verdict: "good" }]), undefined);
  assert.equal(tagAskKind("machine.tag", [{ ask: "weather" }]), undefined);
  assert.equal(tagAskKind("machine.validate", [{ ask: "note" }]), undefined);
  assert.equal(tagAskKind("machine.tag", undefined), undefined);
  assert.equal(tagAskKind("machine.tag", ["x"]), undefined);
  assert.deepEqual(answerAsk({ uri: "u", line: 3, verdict: "good", ask: "rewrite" }, "rewrite", "answer: 4"), { uri: "u", line: 3, verdict: "good", rewrite: "answer: 4" });
  assert.deepEqual(answerAsk({ uri: "u", verdict: "bad", ask: "prompt" }, "prompt", "write f"), { uri: "u", verdict: "bad", prompt: "write f" });
  assert.throws(() => answerAsk({ ask: "note" }, "note", "  "), /note is empty/);
});

test("scaffold arguments: engine and model only when set", () => {
  assert.deepEqual(scaffoldArgs(DEFAULT_SETTINGS), {});
  assert.deepEqual(scaffoldArgs({ ...DEFAULT_SETTINGS, engine: "local", baseModel: "m", trainPath: "t.jsonl", threads: 2 }), { engine: "local", model: "m" });
});

test("train with preferences: DPO, KTO or SFT then DPO; only SFT then DPO keeps the SFT training file", () => {
  assert.deepEqual(PREFERENCE_OBJECTIVES.map((o) => [o.label, o.objective]), [["DPO", "dpo"], ["KTO", "kto"], ["SFT then DPO", "sft+dpo"]]);
  const train = jobArgs({ kind: "train", settings: { ...DEFAULT_SETTINGS, trainPath: "data/train.jsonl" }, workspaceFolder: "/w" });
  assert.equal(train.data, "/w/data/train.jsonl");
  const dpo = preferenceArgs(train, "dpo");
  assert.equal(dpo.objective, "dpo");
  assert.equal("data" in dpo, false);
  assert.equal(preferenceArgs(train, "sft+dpo").data, "/w/data/train.jsonl");
  assert.equal(train.objective, undefined); // the training run's own arguments are not changed
  assert.throws(() => preferenceArgs(train, "sft"), /unknown preference objective: sft/);
});

test("Add a rewrite: machine.retag with ask rewrite is asked for, then sent with the answer", () => {
  const arg = { uri: "file:///w/a.jsonl", id: "abc123", verdict: "good", ask: "rewrite" };
  assert.equal(retagAskKind(SERVER_COMMANDS.retag, [arg]), "rewrite");
  assert.equal(retagAskKind(SERVER_COMMANDS.retag, [{ id: "abc123", verdict: "good" }]), undefined);
  assert.equal(retagAskKind(SERVER_COMMANDS.tag, [arg]), undefined);
  assert.equal(tagAskKind(SERVER_COMMANDS.retag, [arg]), undefined);
  assert.deepEqual(answerAsk(arg, "rewrite", "answer: 56"), { uri: "file:///w/a.jsonl", id: "abc123", verdict: "good", rewrite: "answer: 56" });
});

test("a plain tag action offers a note: the typed note is sent, Enter or Escape tags without one", () => {
  const offered = { uri: "u", line: 3, verdict: "good", offer: "note" };
  assert.equal(tagOffersNote("machine.tag", [offered]), true);
  assert.equal(tagOffersNote("machine.tag", [{ uri: "u", line: 3, verdict: "good" }]), false, "no offer: the action runs as it is");
  assert.equal(tagOffersNote("machine.tag", [{ ...offered, ask: "rewrite" }]), false, "an `ask` must be answered: not a skippable offer");
  assert.equal(tagOffersNote("machine.untag", [offered]), false);
  assert.deepEqual(withOfferedNote(offered, "  wrong unit  "), { uri: "u", line: 3, verdict: "good", note: "wrong unit" });
  assert.deepEqual(withOfferedNote(offered, ""), { uri: "u", line: 3, verdict: "good" });
  assert.deepEqual(withOfferedNote(offered, undefined), { uri: "u", line: 3, verdict: "good" });
});
