import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { test } from "node:test";
import { chooseInterpreter, expandVariables, explainPreflight, PREFLIGHT_SCRIPT, quoteForShell, serverArgs } from "../../src/logic/interpreter";

test("the machine.python setting wins over the Python extension and python3", () => {
  assert.deepEqual(chooseInterpreter({ setting: "/opt/py/bin/python", pythonExtension: "/ext/python" }), { command: "/opt/py/bin/python", source: "setting" });
});

test("the Python extension's interpreter is used when the setting is empty", () => {
  assert.deepEqual(chooseInterpreter({ setting: "  ", pythonExtension: "/ext/python" }), { command: "/ext/python", source: "python-extension" });
});

test("python3 when nothing else is known (python on Windows)", () => {
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

test("the server runs as a module of the chosen interpreter", () => {
  assert.deepEqual(serverArgs(), ["-m", "machine_lsp.lsp.server"]);
});

test("preflight: a missing interpreter names the setting", () => {
  const p = explainPreflight({ command: "/nope/python", source: "setting" }, { errorCode: "ENOENT" });
  assert.ok(p);
  assert.match(p.message, /Python interpreter not found: \/nope\/python \(from the machine\.python setting\)/);
  assert.equal(p.installCommand, undefined);
});

test("preflight: machine-lsp missing gives the pip command for that interpreter", () => {
  const p = explainPreflight({ command: "/usr/bin/python3", source: "default" }, { exitCode: 3 });
  assert.ok(p);
  assert.match(p.message, /^machine-lsp is not installed in \/usr\/bin\/python3: run `\/usr\/bin\/python3 -m pip install machine-lsp`/);
  assert.equal(p.installCommand, "/usr/bin/python3 -m pip install machine-lsp");
});

test("preflight: ok is no problem; other failures show the last stderr line", () => {
  assert.equal(explainPreflight({ command: "python3", source: "default" }, { exitCode: 0 }), undefined);
  const p = explainPreflight({ command: "python3", source: "default" }, { exitCode: 1, stderr: "Traceback\nSyntaxError: bad" });
  assert.ok(p);
  assert.match(p.message, /exit 1\): SyntaxError: bad/);
});

test("shell quoting of odd interpreter paths", () => {
  assert.equal(quoteForShell("/usr/bin/python3"), "/usr/bin/python3");
  assert.equal(quoteForShell("/My Envs/it's/python"), `'/My Envs/it'\\''s/python'`);
});

test("the preflight script really distinguishes installed from missing (run with this machine's python3)", () => {
  const run = (script: string): number => {
    try {
      execFileSync("python3", ["-I", "-c", script], { stdio: "pipe" });
      return 0;
    } catch (e) {
      return (e as { status: number }).status;
    }
  };
  const withModule = (pkg: string, mod: string): string =>
    PREFLIGHT_SCRIPT.replace(/'machine_lsp\.lsp\.server'/g, `'${mod}'`).replace(/'machine_lsp'/g, `'${pkg}'`);
  assert.equal(run(withModule("no_such_pkg_xyz", "no_such_pkg_xyz.server")), 3);
  assert.equal(run(withModule("json", "json.no_such_submodule")), 3);
  assert.equal(run(withModule("json", "json.decoder")), 0);
});
