import assert from "node:assert/strict";
import { test } from "node:test";
import type { CompareReply } from "../../src/generated/replies";
import { cellText, compareView } from "../../src/logic/compare";

// The server's machine.eval.compare reply (CompareReply; its fields are checked against the Python structs).
const reply: CompareReply = {
  message: "step-10 vs baseline: 0% → 67%",
  comparison: {
    a_name: "baseline",
    b_name: "step-10",
    n: 24,
    a_correct: 0,
    b_correct: 16,
    a_accuracy: 0,
    b_accuracy: 0.6667,
    delta: 0.6667,
    gained: 16,
    lost: 0,
    both_correct: 0,
    both_wrong: 8,
    mcnemar_p: 0.0000305,
    a_format_rate: 0,
    b_format_rate: 1,
    changed: [
      { id: "r1", prompt: "2+2?", expected: "answer: 4", a_output: "Four", b_output: "answer: 4", a_correct: false, b_correct: true },
      { id: "r2", prompt: "3+5?", expected: "answer: 8", a_output: "answer: 8", b_output: "answer: 9", a_correct: true, b_correct: false },
    ],
    outputs_changed: 20,
    only_in_a: [],
    only_in_b: ["x9"],
    same_data: true,
    a_bleed_rate: null,
    b_bleed_rate: 0.2,
  },
};

test("a comparison becomes a summary and a table of changed rows", () => {
  const v = compareView(reply);
  assert.equal(v.title, "baseline → step-10");
  const summary = Object.fromEntries(v.summary.map((s) => [s.label, s.value]));
  assert.equal(summary["accuracy baseline"], "0.0%");
  assert.equal(summary["accuracy step-10"], "66.7%");
  assert.equal(summary["correct step-10"], "16");
  assert.equal(summary["format rate step-10"], "100.0%");
  assert.equal(summary["style bleed step-10"], "20.0%");
  assert.equal(summary["style bleed baseline"], undefined, "a null rate is not shown");
  assert.equal(summary["paired rows"], "24");
  assert.equal(summary["Δ accuracy"], "+66.7 pts");
  assert.equal(summary["McNemar p (exact)"], "3.05e-5");
  assert.equal(summary["gained (wrong → right)"], "16");
  assert.equal(summary["outputs changed"], "20");
  assert.equal(summary["same data"], "✓");
  assert.equal(summary["only in step-10"], "1: x9");
  assert.equal(summary["only in baseline"], undefined);
  assert.deepEqual(v.columns, ["id", "prompt", "expected", "baseline output", "step-10 output", "baseline ✓", "step-10 ✓"]);
  assert.deepEqual(v.rows.map((r) => r.change), ["fixed", "broken"]);
  assert.deepEqual(v.rows[0]?.cells, ["r1", "2+2?", "answer: 4", "Four", "answer: 4", "✗", "✓"]);
});

test("a negative delta, a large p, no changed rows", () => {
  const v = compareView({ ...reply, comparison: { ...reply.comparison, a_name: "x", b_name: "y", delta: -0.125, mcnemar_p: 0.5, changed: [] } });
  const summary = Object.fromEntries(v.summary.map((s) => [s.label, s.value]));
  assert.equal(summary["Δ accuracy"], "−12.5 pts");
  assert.equal(summary["McNemar p (exact)"], "0.500");
  assert.deepEqual(v.rows, []);
});

test("cells are flattened and truncated", () => {
  assert.equal(cellText("a\n  b"), "a b");
  assert.equal(cellText("x".repeat(200), 10), "xxxxxxxxx…");
  assert.equal(cellText(null), "");
  assert.equal(cellText({ k: 1 }), '{"k":1}');
});
