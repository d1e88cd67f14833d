import assert from "node:assert/strict";
import { test } from "node:test";
import { DEFAULT_SETTINGS, needsRestart, readSettings, toServerOptions } from "../../src/logic/settings";

const getter = (values: Record<string, unknown>) => (k: string): unknown => values[k];
const isSet = (values: Record<string, unknown>) => (k: string): boolean => k in values;

test("readSettings: defaults when nothing is set", () => {
  assert.deepEqual(readSettings(getter({})), DEFAULT_SETTINGS);
});

test("readSettings: reads, trims and sanitizes every setting", () => {
  const s = readSettings(
    getter({
      python: "  /venv/bin/python ",
      importStrategy: "fromEnvironment",
      engine: "tinker",
      baseModel: "Qwen/Qwen3-8B",
      "data.train": "data/train.jsonl",
      "data.eval": "data/eval.jsonl",
      "data.trainGlobs": ["**/*.jsonl", 3, "", "data/*.jsonl"],
      "data.evalGlobs": ["**/held/*.jsonl"],
      threads: 2.7,
      confirmPaidRuns: false,
    }),
  );
  assert.deepEqual(s, {
    python: "/venv/bin/python",
    importStrategy: "fromEnvironment",
    engine: "tinker",
    baseModel: "Qwen/Qwen3-8B",
    trainPath: "data/train.jsonl",
    evalPath: "data/eval.jsonl",
    trainGlobs: ["**/*.jsonl", "data/*.jsonl"],
    evalGlobs: ["**/held/*.jsonl"],
    threads: 2,
    confirmPaidRuns: false,
  });
});

test("readSettings: the engine counts only when the user set it (VS Code returns the schema default otherwise)", () => {
  const values = { engine: "local" };
  assert.equal(readSettings(getter(values), () => false).engine, undefined);
  assert.equal(readSettings(getter(values), isSet(values)).engine, "local");
});

test("readSettings: an unknown engine or a bad thread count falls back to the default", () => {
  const s = readSettings(getter({ engine: "gpu-cluster", threads: -4, confirmPaidRuns: "yes" }));
  assert.equal(s.engine, undefined);
  assert.equal(s.threads, 0);
  assert.equal(s.confirmPaidRuns, true);
});

test("toServerOptions: the server's camelCase keys, empty settings omitted (server defaults apply)", () => {
  assert.deepEqual(toServerOptions(DEFAULT_SETTINGS), { confirmPaidRuns: true, client: "vscode", clientPrompts: true });
  const full = toServerOptions({ ...DEFAULT_SETTINGS, engine: "tinker", baseModel: "m", trainPath: "t.jsonl", evalPath: "e.jsonl", trainGlobs: ["*.jsonl"], evalGlobs: ["e/*.jsonl"], threads: 3, confirmPaidRuns: false });
  assert.deepEqual(full, { confirmPaidRuns: false, client: "vscode", clientPrompts: true, engine: "tinker", baseModel: "m", trainPath: "t.jsonl", evalPath: "e.jsonl", trainGlobs: ["*.jsonl"], evalGlobs: ["e/*.jsonl"], threads: 3 });
});

test("toServerOptions never carries the interpreter or any key-like field", () => {
  const opts = toServerOptions({ ...DEFAULT_SETTINGS, python: "/secret/python" });
  assert.equal(JSON.stringify(opts).includes("/secret/python"), false);
  assert.equal(Object.keys(opts).some((k) => /key|token|secret/i.test(k)), false);
});

test("needsRestart only when the interpreter or the import strategy changes", () => {
  assert.equal(needsRestart(DEFAULT_SETTINGS, { ...DEFAULT_SETTINGS, engine: "tinker" }), false);
  assert.equal(needsRestart(DEFAULT_SETTINGS, { ...DEFAULT_SETTINGS, python: "/x/python" }), true);
  assert.equal(needsRestart(DEFAULT_SETTINGS, { ...DEFAULT_SETTINGS, importStrategy: "fromEnvironment" }), true);
  assert.equal(readSettings(getter({ importStrategy: "bogus" })).importStrategy, "useBundled");
});
