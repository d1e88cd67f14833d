import assert from "node:assert/strict";
import { test } from "node:test";
import { spawnSync } from "node:child_process";
import { confirmationView, folderScope, stderrLevel } from "../../src/logic/client";

test("one project per window: with several folders the first is the project, and the message says so", () => {
  assert.deepEqual(folderScope([]), { folder: undefined, notice: undefined });
  assert.deepEqual(folderScope([{ name: "a", fsPath: "/w/a" }]), { folder: "/w/a", notice: undefined });
  const two = folderScope([{ name: "a", fsPath: "/w/a" }, { name: "b", fsPath: "/w/b" }, { name: "c", fsPath: "/w/c" }]);
  assert.equal(two.folder, "/w/a");
  assert.match(two.notice ?? "", /those of “a”, and tags made in b, c go there too/);
});

test("stderr lines keep their level: a library warning is a warning, a traceback an error", () => {
  // What a real Python writes: warnings.warn from a library, logging through the server's format, a crash.
  const script = [
    "import logging, sys, warnings",
    "logging.basicConfig(stream=sys.stderr, level=logging.DEBUG, format='machine-lsp %(levelname)s %(message)s')",
    "warnings.warn('`torch_dtype` is deprecated', FutureWarning)",
    "logging.getLogger('transformers').warning('Token indices sequence length is longer than the maximum')",
    "logging.getLogger('machine_lsp').info('started')",
    "logging.getLogger('pygls').error('handler failed')",
    "raise ValueError('boom')",
  ].join("\n");
  const out = spawnSync(process.env.MACHINE_E2E_BARE_PYTHON ?? "python3", ["-c", script], { encoding: "utf8" });
  const lines = out.stderr.split("\n").filter((l) => l.trim());
  const level = (needle: string): string => stderrLevel(lines.find((l) => l.includes(needle)) ?? `(no line with ${needle})`);
  assert.equal(level("FutureWarning"), "warn");
  assert.equal(level("Token indices"), "warn");
  assert.equal(level("started"), "info");
  assert.equal(level("handler failed"), "error");
  assert.equal(level("Traceback"), "error");
  assert.equal(level("ValueError: boom"), "error");
  assert.equal(stderrLevel("Loading weights 3/12"), "info", "a plain line is no error");
});

test("a server question becomes a modal dialog: the question, then the plan as its detail", () => {
  const view = confirmationView("machine: start the training run? 12 steps on 40 rows with local SmolLM2 (about 2 min).", [{ title: "Run" }, { title: "Cancel" }]);
  assert.equal(view.message, "Machine: Start the training run?");
  assert.equal(view.detail, "12 steps on 40 rows with local SmolLM2 (about 2 min).");
  assert.deepEqual(view.actions, [{ title: "Run", close: false }, { title: "Cancel", close: true }]);
  assert.deepEqual(confirmationView("Overwrite train_sft.py", [{ title: "Yes" }]), { message: "Machine: Overwrite train_sft.py", detail: "", actions: [{ title: "Yes", close: false }] });
});
