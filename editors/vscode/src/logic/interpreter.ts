/** Which Python runs the server, and how to explain a server that cannot start. Pure: no `vscode` import. */
import * as path from "node:path";

export type InterpreterSource = "setting" | "python-extension" | "default";

export interface Interpreter {
  command: string;
  source: InterpreterSource;
}

export interface InterpreterInputs {
  /** The `machine.python` setting, raw. */
  setting: string;
  /** The Python extension's active interpreter, when that extension is installed and reports one. */
  pythonExtension?: string | undefined;
  workspaceFolder?: string | undefined;
  home?: string | undefined;
  platform?: NodeJS.Platform;
}

/** Expands `${workspaceFolder}`, `${userHome}`, `${env:NAME}` and a leading `~`. */
export function expandVariables(
  value: string,
  workspaceFolder: string | undefined,
  home: string | undefined,
  env: Record<string, string | undefined> = process.env,
): string {
  let out = value.replace(/\$\{(workspaceFolder|userHome|env:([A-Za-z_][A-Za-z0-9_]*))\}/g, (m, name: string, envName?: string) => {
    if (name === "workspaceFolder") return workspaceFolder ?? m;
    if (name === "userHome") return home ?? m;
    return envName !== undefined ? (env[envName] ?? "") : m;
  });
  if (home && (out === "~" || out.startsWith("~/"))) out = home + out.slice(1);
  if (workspaceFolder && out && !path.isAbsolute(out) && (out.includes("/") || out.includes("\\"))) {
    out = path.join(workspaceFolder, out); // a relative path like .venv/bin/python
  }
  return out;
}

export function chooseInterpreter(inputs: InterpreterInputs): Interpreter {
  const setting = inputs.setting.trim();
  if (setting) {
    return { command: expandVariables(setting, inputs.workspaceFolder, inputs.home), source: "setting" };
  }
  const fromExt = inputs.pythonExtension?.trim();
  if (fromExt) return { command: fromExt, source: "python-extension" };
  return { command: (inputs.platform ?? process.platform) === "win32" ? "python" : "python3", source: "default" };
}

/** The server is started as a module so that it runs in exactly the chosen interpreter. */
export function serverArgs(): string[] {
  return ["-m", "machine_lsp.lsp.server"];
}

/** A tiny script the extension runs first: exit 0 when the server module is importable, 3 when it is not. */
export const PREFLIGHT_SCRIPT =
  "import importlib.util, sys\n" +
  "sys.exit(0 if importlib.util.find_spec('machine_lsp') and importlib.util.find_spec('machine_lsp.lsp.server') else 3)\n";

export interface PreflightOutcome {
  /** spawn error code, e.g. ENOENT / EACCES, when the interpreter could not be run at all */
  errorCode?: string | undefined;
  exitCode?: number | null | undefined;
  stderr?: string | undefined;
}

export interface StartProblem {
  message: string;
  /** What the user can do: a shell command to copy, and whether changing `machine.python` helps. */
  installCommand?: string;
  offerSetting: boolean;
}

export function quoteForShell(p: string): string {
  return /^[A-Za-z0-9_./:@=+-]+$/.test(p) ? p : `'${p.replace(/'/g, `'\\''`)}'`;
}

/** Turns the preflight result into an actionable message, or undefined when the server can start. */
export function explainPreflight(interp: Interpreter, out: PreflightOutcome): StartProblem | undefined {
  const where = interp.source === "setting" ? " (from the machine.python setting)" : interp.source === "python-extension" ? " (the Python extension's interpreter)" : "";
  if (out.errorCode === "ENOENT") {
    return { message: `Python interpreter not found: ${interp.command}${where}. Set "machine.python" to a Python that has machine-lsp installed.`, offerSetting: true };
  }
  if (out.errorCode) {
    return { message: `Cannot run ${interp.command}${where}: ${out.errorCode}. Set "machine.python" to a working Python.`, offerSetting: true };
  }
  if (out.exitCode === 0) return undefined;
  const installCommand = `${quoteForShell(interp.command)} -m pip install machine-lsp`;
  if (out.exitCode === 3) {
    return {
      message: `machine-lsp is not installed in ${interp.command}${where}: run \`${installCommand}\` (or \`pip install -e .\` in a checkout), or set "machine.python".`,
      installCommand,
      offerSetting: true,
    };
  }
  const detail = (out.stderr ?? "").trim().split("\n").slice(-1)[0] ?? "";
  return {
    message: `${interp.command}${where} failed to check for machine-lsp (exit ${String(out.exitCode)})${detail ? `: ${detail}` : ""}. Set "machine.python" to a Python 3.11+ with machine-lsp installed.`,
    installCommand,
    offerSetting: true,
  };
}
