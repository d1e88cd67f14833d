// The Python the generators ask for what they generate from (machine_lsp's reply structs, its verb registry):
// MACHINE_PYTHON, else <repo>/.venv/bin/python, else python3, with the repository on its path.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

export const EXT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
export const ROOT = path.resolve(EXT, "../..");

export function python() {
  if (process.env.MACHINE_PYTHON) return process.env.MACHINE_PYTHON;
  const venv = path.join(ROOT, ".venv/bin/python");
  return existsSync(venv) ? venv : "python3";
}

/** stdout of `python -m <module> <args>`, or undefined (with a warning naming `tag`) when it cannot run here. */
export function pythonModuleOutput(tag, module, args) {
  const exe = python();
  const run = spawnSync(exe, ["-m", module, ...args], {
    cwd: ROOT,
    env: { ...process.env, PYTHONPATH: [ROOT, process.env.PYTHONPATH].filter(Boolean).join(path.delimiter) },
    encoding: "utf8",
  });
  if (run.status !== 0) {
    console.warn(`[${tag}] ${exe} cannot run ${module} (${(run.stderr || String(run.error)).trim().split("\n").pop()})`);
    return undefined;
  }
  return run.stdout;
}
