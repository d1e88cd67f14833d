/** Starts, restarts and configures the machine-lsp language server (like the Python-tools extension template). */
import { execFile } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { PythonExtension } from "@vscode/python-extension";
import * as vscode from "vscode";
import {
  DidChangeConfigurationNotification,
  ExecuteCommandRequest,
  LanguageClient,
  State,
  type LanguageClientOptions,
  type Middleware,
  type ServerOptions,
} from "vscode-languageclient/node";
import { ASK_AND_RETAG_COMMAND, ASK_AND_TAG_COMMAND, OFFER_NOTE, retagAskKind, SERVER_COMMANDS, tagAskKind, tagOffersNote } from "./logic/args";
import * as readline from "node:readline";
import { folderScope, stderrLevel } from "./logic/client";
import { serverShownError } from "./logic/replies";
import {
  chooseInterpreter,
  explainPreflight,
  parsePreflight,
  PREFLIGHT_SCRIPT,
  serverArgs,
  serverEnv,
  trainingProblem,
  type Interpreter,
  type PreflightOutcome,
  type PreflightReport,
  type StartAction,
} from "./logic/interpreter";
import { needsRestart, readSettings, toServerOptions, type MachineSettings } from "./logic/settings";
import type { ServerState } from "./logic/status";
import { RESTRICTED_NOTICE, restrictedCodeAction } from "./logic/trust";

export const TINKER_SECRET = "machine.tinkerApiKey";

function routeAskingActions<T extends vscode.Command | vscode.CodeAction>(item: T): T {
  const cmd: vscode.Command | undefined = item instanceof vscode.CodeAction ? item.command : item;
  if (!cmd || typeof cmd.command !== "string") return item;
  const ask =
    tagAskKind(cmd.command, cmd.arguments) ??
    retagAskKind(cmd.command, cmd.arguments) ??
    (tagOffersNote(cmd.command, cmd.arguments) ? OFFER_NOTE : undefined);
  if (!ask) return item;
  const via = cmd.command === SERVER_COMMANDS.retag ? ASK_AND_RETAG_COMMAND : ASK_AND_TAG_COMMAND;
  const routed: vscode.Command = { title: cmd.title, command: via, arguments: [ask, cmd.arguments?.[0]] };
  if (item instanceof vscode.CodeAction) {
    item.command = routed;
    return item;
  }
  return routed as T;
}

/** The folder this window's server serves (the first one; see logic/client.ts folderScope). */
export function workspaceFolder(): vscode.WorkspaceFolder | undefined {
  return vscode.workspace.workspaceFolders?.[0];
}

export function currentSettings(): MachineSettings {
  const cfg = vscode.workspace.getConfiguration("machine", workspaceFolder());
  return readSettings(
    (k) => cfg.get(k),
    (k) => {
      const i = cfg.inspect(k);
      return i !== undefined && [i.globalValue, i.workspaceValue, i.workspaceFolderValue].some((v) => v !== undefined);
    },
  );
}

export function workspaceFolderPath(): string | undefined {
  return workspaceFolder()?.uri.fsPath;
}

/** The Python extension's API, when ms-python is installed (it cannot be here offline: then machine.python rules). */
async function pythonApi(): Promise<PythonExtension | undefined> {
  if (!vscode.extensions.getExtension("ms-python.python")) return undefined;
  try {
    return await PythonExtension.api();
  } catch {
    return undefined;
  }
}

/** The Python extension's selected environment for the folder, as an executable path. */
async function pythonExtensionInterpreter(api: PythonExtension | undefined, resource: vscode.Uri | undefined): Promise<string | undefined> {
  if (!api) return undefined;
  try {
    const env = await api.environments.resolveEnvironment(api.environments.getActiveEnvironmentPath(resource));
    return env?.executable.uri?.fsPath;
  } catch {
    return undefined; // the Python extension failed: fall back
  }
}

function runPreflight(interp: Interpreter, cwd: string | undefined, env: Record<string, string>): Promise<PreflightOutcome> {
  return new Promise((resolve) => {
    execFile(interp.command, ["-c", PREFLIGHT_SCRIPT], { cwd, env, timeout: 20_000 }, (err, stdout, stderr) => {
      if (!err) {
        resolve({ exitCode: 0, stdout, stderr });
        return;
      }
      const e = err as NodeJS.ErrnoException & { code?: string | number };
      if (typeof e.code === "string") resolve({ errorCode: e.code, stderr });
      else resolve({ exitCode: typeof e.code === "number" ? e.code : null, stdout, stderr });
    });
  });
}

export interface ServerRuntime {
  interpreter: Interpreter;
  report: PreflightReport | undefined;
}

export class ServerManager implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private settings: MachineSettings;
  private starting: Promise<LanguageClient | undefined> | undefined;
  private readonly disposables: vscode.Disposable[] = [];
  private readonly clientListeners: ((client: LanguageClient) => void)[] = [];
  private python: PythonExtension | undefined;
  private noticeShown = false;
  /** The interpreter the running server uses and what the preflight found in it. */
  runtime: ServerRuntime | undefined;
  /** The server's state for the status item, and why it is not running when it failed. */
  state: ServerState = "stopped";
  problem: string | undefined;
  serverInfo: string | undefined;
  private readonly stateListeners: (() => void)[] = [];

  constructor(
    private readonly context: vscode.ExtensionContext,
    readonly output: vscode.LogOutputChannel,
  ) {
    this.settings = currentSettings();
    this.disposables.push(
      vscode.workspace.onDidChangeConfiguration((e) => {
        if (e.affectsConfiguration("machine")) void this.onConfigChanged();
        else if (e.affectsConfiguration("python.defaultInterpreterPath") && !this.settings.python) void this.restart("python.defaultInterpreterPath changed");
      }),
      context.secrets.onDidChange((e) => {
        if (e.key === TINKER_SECRET) void this.restart("Tinker key changed");
      }),
      // Restricted Mode ends: restart with the folder's own settings and everything on.
      vscode.workspace.onDidGrantWorkspaceTrust(() => {
        void this.restart("the folder is trusted now");
      }),
    );
  }

  /** Called whenever the server's state changes (the status item). */
  onState(listener: () => void): void {
    this.stateListeners.push(listener);
  }

  private setState(state: ServerState, problem?: string): void {
    this.state = state;
    this.problem = problem;
    for (const l of this.stateListeners) l();
  }

  /** The bundled server (bundled/libs in the .vsix), when this build has one. */
  get bundledLibs(): string | undefined {
    const libs = path.join(this.context.extensionPath, "bundled", "libs");
    return fs.existsSync(path.join(libs, "machine_lsp")) ? libs : undefined;
  }

  /** The machine-lsp wheel bundled for "Create Training Environment". */
  get bundledWheel(): string | undefined {
    const dist = path.join(this.context.extensionPath, "bundled", "dist");
    const wheel = fs.existsSync(dist) ? fs.readdirSync(dist).find((f) => f.startsWith("machine_lsp-") && f.endsWith(".whl")) : undefined;
    return wheel ? path.join(dist, wheel) : undefined;
  }

  /** Called with every new client once it runs (to attach notification handlers). */
  onClient(listener: (client: LanguageClient) => void): void {
    this.clientListeners.push(listener);
    if (this.client?.state === State.Running) listener(this.client);
  }

  /** The running client, starting the server if needed; undefined when it cannot start (the user was told). */
  async ensureClient(): Promise<LanguageClient | undefined> {
    if (this.client?.state === State.Running) return this.client;
    if (this.client?.state === State.Starting) {
      // The client library is restarting a crashed server: wait for it rather than start a second one.
      const client = this.client;
      const running = await new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => {
          sub.dispose();
          resolve(false);
        }, 30_000);
        const sub = client.onDidChangeState((e) => {
          if (e.newState === State.Starting) return;
          clearTimeout(timer);
          sub.dispose();
          resolve(e.newState === State.Running);
        });
      });
      if (running) return client;
    }
    this.starting ??= this.start().finally(() => {
      this.starting = undefined;
    });
    return this.starting;
  }

  /** Why the training verbs cannot run with the server's interpreter, or undefined. */
  trainingProblem(): string | undefined {
    return this.runtime ? trainingProblem(this.runtime.interpreter, this.runtime.report) : undefined;
  }

  private async watchPythonExtension(): Promise<void> {
    if (this.python) return;
    this.python = await pythonApi();
    if (!this.python) return;
    this.disposables.push(
      this.python.environments.onDidChangeActiveEnvironmentPath((e) => {
        if (this.settings.python) return; // machine.python wins; the Python extension's choice does not matter
        const folder = workspaceFolder();
        if (e.resource && folder && e.resource.uri.toString() !== folder.uri.toString()) return;
        void this.restart(`the Python extension selected ${e.path}`);
      }),
    );
  }

  private async start(): Promise<LanguageClient | undefined> {
    await this.stop(); // a client the library gave up restarting: dispose of it before starting anew
    this.tellFolderScope();
    const folder = workspaceFolder();
    this.settings = currentSettings();
    this.setState("starting");
    const { interp, strategy, bundled, cwd, env } = await this.launchPlan(folder);
    this.output.info(`interpreter: ${interp.command} (${interp.source}); importStrategy ${strategy}${strategy === "useBundled" ? (bundled ? `, bundled server ${bundled}` : ", no bundled server in this build") : ""}`);
    const outcome = await runPreflight(interp, cwd, env);
    const report = parsePreflight(outcome);
    this.runtime = { interpreter: interp, report };
    if (report) this.output.debug(`preflight: Python ${report.version.join(".")} at ${report.executable}; server importable ${report.server}; training modules missing: ${report.missing_training.join(", ") || "none"}`);
    const problem = explainPreflight(interp, strategy, bundled !== undefined, outcome);
    if (problem) {
      this.output.error(`cannot start the server: ${problem.message}`);
      this.setState("failed", problem.message);
      void this.reportStartProblem(problem.message, problem.actions);
      return undefined;
    }

    const serverOptions: ServerOptions = {
      command: interp.command,
      args: serverArgs(), // stdio; no transport kind, which would append --stdio
      options: { cwd, env },
    };
    const clientOptions = this.clientOptions(folder, () => client);
    const client = new LanguageClient("machine", "Machine", serverOptions, clientOptions);
    this.client = client;
    try {
      await client.start();
    } catch (err) {
      this.output.error(`the server did not start: ${String(err)}`);
      this.setState("failed", `the server did not start: ${String(err)}`);
      void this.reportStartProblem(`machine-lsp failed to start with ${interp.command}: ${String(err)}`, ["Set Interpreter", "Show Log"]);
      return undefined;
    }
    const info = client.initializeResult?.serverInfo;
    this.output.info(`server started: ${info?.name ?? "machine-lsp"} ${info?.version ?? ""}`);
    this.serverInfo = `${info?.name ?? "machine-lsp"} ${info?.version ?? ""}`.trim();
    this.setState("running");
    client.onDidChangeState((e) => {
      if (this.client !== client) return;
      if (e.newState === State.Running) this.setState("running");
      else if (e.newState === State.Starting) this.setState("starting");
      else this.setState("stopped");
    });
    for (const l of this.clientListeners) l(client);
    return client;
  }

  /** Once per window with several folders: which project the server serves (logic/client.ts folderScope). */
  private tellFolderScope(): void {
    const folders = vscode.workspace.workspaceFolders ?? [];
    const scope = folderScope(folders.map((f) => ({ name: f.name, fsPath: f.uri.fsPath })));
    if (scope.notice && !this.noticeShown) {
      this.noticeShown = true;
      this.output.warn(scope.notice);
      void vscode.window.showWarningMessage(`Machine: ${scope.notice}`);
    }
  }

  /**
   * Which interpreter runs the server, from where and with which environment. Untrusted (Restricted Mode): the
   * user's settings only, the bundled server, and a working directory outside the folder.
   */
  private async launchPlan(folder: vscode.WorkspaceFolder | undefined): Promise<{ interp: Interpreter; strategy: "useBundled" | "fromEnvironment"; bundled: string | undefined; cwd: string | undefined; env: Record<string, string> }> {
    const trusted = vscode.workspace.isTrusted;
    if (trusted) await this.watchPythonExtension();
    else this.output.warn(RESTRICTED_NOTICE);
    // Untrusted: machine.* are restrictedConfigurations (VS Code reads only the user's values); python.* is not
    // ours, so only its user value counts, and the Python extension (which may follow the folder) is not asked.
    const defaultPath = vscode.workspace.getConfiguration("python", folder).inspect<string>("defaultInterpreterPath");
    const interp = chooseInterpreter({
      setting: this.settings.python,
      pythonExtension: this.settings.python || !trusted ? undefined : await pythonExtensionInterpreter(this.python, folder?.uri),
      defaultInterpreterPath: trusted ? vscode.workspace.getConfiguration("python", folder).get<string>("defaultInterpreterPath") : defaultPath?.globalValue,
      workspaceFolder: folder?.uri.fsPath,
      home: os.homedir(),
    });
    const bundled = this.bundledLibs;
    const strategy = trusted ? this.settings.importStrategy : "useBundled";
    // Untrusted: run outside the folder, so that `python -m` / `-c` (cwd first on sys.path) import no module of it.
    fs.mkdirSync(this.context.globalStorageUri.fsPath, { recursive: true });
    const cwd = trusted ? folder?.uri.fsPath : this.context.globalStorageUri.fsPath;
    const base: Record<string, string | undefined> = { ...process.env };
    if (!base.TINKER_API_KEY) {
      const key = await this.context.secrets.get(TINKER_SECRET);
      if (key) base.TINKER_API_KEY = key; // only into the child's environment; never logged or sent as a setting
    }
    const env = serverEnv(strategy, bundled, base);
    return { interp, strategy, bundled, cwd, env };
  }

  /** The language client's options: documents, logs, stderr levels, and the middleware (asking actions, trust). */
  private clientOptions(folder: vscode.WorkspaceFolder | undefined, client: () => LanguageClient): LanguageClientOptions {
    return {
      documentSelector: [
        { scheme: "file", language: "jsonl" },
        { scheme: "file", pattern: "**/*.jsonl" },
        { scheme: "untitled", language: "jsonl" },
      ],
      ...(folder ? { workspaceFolder: folder } : {}),
      outputChannel: this.output,
      // A log channel: the client library traces the protocol when its level is Trace (detail: machine.trace.server).
      traceOutputChannel: this.output,
      initializationOptions: toServerOptions(this.settings),
      // The client would log every stderr line as an error: a library's warning is a warning (logic/client.ts).
      stdioOptions: {
        stdout: (input, channel) => {
          readline.createInterface({ input, crlfDelay: Infinity, terminal: false, historySize: 0 }).on("line", (line) => {
            channel.info(line);
          });
        },
        stderr: (input, channel) => {
          readline.createInterface({ input, crlfDelay: Infinity, terminal: false, historySize: 0 }).on("line", (line) => {
            channel[stderrLevel(line)](line);
          });
        },
      },
      // Crashes: the client library's own handling (restart up to 4 times in 3 minutes, then tell the user).
      middleware: this.middleware(client),
      initializationFailedHandler: (error) => {
        this.output.error(`initialize failed: ${String(error)}`);
        return false;
      },
    };
  }

  /** Code actions that ask route through the asking command; Restricted Mode drops commands; errors shown once. */
  private middleware(client: () => LanguageClient): Middleware {
    return {
      // Code actions that need an answer (note, rewrite, prompt) run through a client command that asks first.
      // Restricted Mode: quick fixes keep their edits; commands (tags write the store, jobs run) wait for trust.
      provideCodeActions: async (document, range, context, token, next) => {
        const items = await next(document, range, context, token);
        if (!vscode.workspace.isTrusted) return items?.map((i) => restrictedCodeAction(i)).filter((i) => i !== undefined);
        return items?.map(routeAskingActions);
      },
      resolveCodeAction: async (item, token, next) => {
        const resolved = await next(item, token);
        if (!vscode.workspace.isTrusted) return resolved ? restrictedCodeAction(resolved) : resolved;
        return resolved ? routeAskingActions(resolved) : resolved;
      },
      // A user error the server has shown already (one line): logged once, not shown a second time.
      executeCommand: async (command, args) => {
        if (!vscode.workspace.isTrusted) {
          void vscode.window.showWarningMessage(`Machine: ${command} is off in Restricted Mode. Trust the folder to use it.`);
          return undefined;
        }
        try {
          return (await client().sendRequest(ExecuteCommandRequest.type, { command, arguments: args })) as unknown;
        } catch (err) {
          const shown = serverShownError(err);
          if (shown === undefined) throw err;
          this.output.info(`${command}: ${shown}`);
          return undefined;
        }
      },
    };
  }

  private async reportStartProblem(message: string, actions: StartAction[]): Promise<void> {
    const pick = await vscode.window.showErrorMessage(message, ...actions);
    if (pick === "Set Interpreter") await vscode.commands.executeCommand("workbench.action.openSettings", "machine.python");
    else if (pick === "Show Log") this.output.show();
    else if (pick === "Use Bundled Server") {
      await vscode.workspace.getConfiguration("machine").update("importStrategy", "useBundled", vscode.ConfigurationTarget.Global);
      const inspect = vscode.workspace.getConfiguration("machine", workspaceFolder()).inspect("importStrategy");
      if (inspect?.workspaceValue !== undefined) await vscode.workspace.getConfiguration("machine").update("importStrategy", undefined, vscode.ConfigurationTarget.Workspace);
    }
  }

  async restart(reason: string): Promise<void> {
    this.output.info(`restarting the server (${reason}).`);
    await this.stop();
    await this.ensureClient();
  }

  private async onConfigChanged(): Promise<void> {
    const next = currentSettings();
    const restart = needsRestart(this.settings, next);
    this.settings = next;
    if (restart) {
      await this.restart("machine.python or machine.importStrategy changed");
      return;
    }
    const client = this.client;
    if (client?.state === State.Running) {
      await client.sendNotification(DidChangeConfigurationNotification.type, { settings: { machine: toServerOptions(next) } });
    }
  }

  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (!client) return;
    this.setState("stopped");
    try {
      if (client.state !== State.Stopped) await client.stop(5000);
    } catch (err) {
      this.output.warn(`stopping the server: ${String(err)}`);
    }
    try {
      await client.dispose(2000);
    } catch {
      // already stopped
    }
  }

  dispose(): void {
    void this.stop();
    for (const d of this.disposables) d.dispose();
  }
}
