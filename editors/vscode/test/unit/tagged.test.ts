import assert from "node:assert/strict";
import { test } from "node:test";
import type { TaggedReply } from "../../src/generated/replies";
import { parseRowAction, retagArgs, rowMatches, taggedRows } from "../../src/logic/tagged";

const reply: TaggedReply = {
  store: "/ws/.machine/tagged.jsonl",
  warnings: [],
  records: [
    { id: "r1", verdict: "good", note: "right", answer: "answer: 62", prompt: "What is 31 * 2?", rewritten: false, trace: false, created_at: "2026-12-01T10:00:00.123Z", trained_in: ["20261201-100500-train-run-ab12"], source: { kind: "chat_jsonl", uri: "file:///ws/chats.jsonl", line: 3 } },
    { id: "r2", verdict: "bad", note: "", answer: "answer: 62", prompt: "What is 60 + 3?", rewritten: false, trace: false, created_at: "2026-12-01T10:05:00Z", trained_in: [], source: { kind: "session_log", uri: "file:///h/.codex/s.jsonl", line: 9, harness: "codex" } },
    { id: "r3", verdict: "good", note: "", answer: "63", prompt: "What is\n 60 + 3?", rewritten: true, trace: false, created_at: "2026-12-01T10:06:00Z", trained_in: [], source: { kind: "selection", uri: "file:///ws/notes.md", line: null } },
  ],
};
const rows = taggedRows(reply, (u) => u.split("/").pop() ?? u);

test("two rows with the same answer differ by their prompt; each row says where, who and when", () => {
  assert.deepEqual(rows.map((r) => [r.prompt, r.answer, r.verdict]), [["What is 31 * 2?", "answer: 62", "good"], ["What is 60 + 3?", "answer: 62", "bad"], ["What is 60 + 3?", "63", "good"]]);
  assert.deepEqual(rows.map((r) => [r.harness, r.when, r.where, r.answerKind]), [["jsonl", "2026-12-01 10:00", "chats.jsonl:3", "answer"], ["codex", "2026-12-01 10:05", "s.jsonl:9", "answer"], ["selection", "2026-12-01 10:06", "notes.md", "rewrite"]]);
});

test("each row names the runs that trained on it: none yet for a good row, nothing for a bad one", () => {
  assert.deepEqual(rows.map((r) => r.trainedIn), ["20261201-100500-train-run-ab12", "", "not yet"]);
  assert.deepEqual(rows.filter((r) => rowMatches(r, "train-run")).map((r) => r.id), ["r1"], "the search finds it too");
});

test("search: every word in any column; good and bad pick the verdict", () => {
  const found = (q: string): string[] => rows.filter((r) => rowMatches(r, q)).map((r) => r.id);
  assert.deepEqual(found(""), ["r1", "r2", "r3"]);
  assert.deepEqual(found("62"), ["r1", "r2"]);
  assert.deepEqual(found("62 bad"), ["r2"]);
  assert.deepEqual(found("60 good"), ["r3"]);
  assert.deepEqual(found("CODEX"), ["r2"]);
  assert.deepEqual(found("right 31"), ["r1"], "the note and the prompt");
  assert.deepEqual(found("nowhere"), []);
});

test("row actions from the webview are checked, and a flip or a note becomes machine.retag's argument", () => {
  assert.deepEqual(parseRowAction({ type: "untag", id: "r1" }), { type: "untag", id: "r1" });
  assert.equal(parseRowAction({ type: "rm", id: "r1" }), undefined);
  assert.equal(parseRowAction({ type: "open", id: "../../etc" }), undefined);
  assert.equal(parseRowAction("open"), undefined);
  const [first] = rows;
  assert.ok(first);
  assert.deepEqual(retagArgs(first, { flip: true }), { id: "r1", verdict: "bad" });
  assert.deepEqual(retagArgs(first, { note: "checked" }), { id: "r1", note: "checked" });
});
