/** Starts, restarts and configures the machine-lsp language server. */
import { execFile } from "node:child_process";
import * as os from "node:os";
import * as vscode from "vscode";
import {
  CloseAction,
  DidChangeConfigurationNotification,
  ErrorAction,
  LanguageClient,
  State,
  type LanguageClientOptions,
  type ServerOptions,
} from "vscode-languageclient/node";
import { ASK_AND_TAG_COMMAND, tagAskKind } from "./logic/args";
import { RestartPolicy } from "./logic/backoff";
import { chooseInterpreter, explainPreflight, PREFLIGHT_SCRIPT, serverArgs, type Interpreter, type PreflightOutcome } from "./logic/interpreter";
import { needsRestart, readSettings, toServerOptions, type MachineSettings } from "./logic/settings";

export const TINKER_SECRET = "machine.tinkerApiKey";

function routeAskingActions<T extends vscode.Command | vscode.CodeAction>(item: T): T {
  const cmd: vscode.Command | undefined = item instanceof vscode.CodeAction ? item.command : item;
  if (!cmd || typeof cmd.command !== "string") return item;
  const ask = tagAskKind(cmd.command, cmd.arguments);
  if (!ask) return item;
  const routed: vscode.Command = { title: cmd.title, command: ASK_AND_TAG_COMMAND, arguments: [ask, cmd.arguments?.[0]] };
  if (item instanceof vscode.CodeAction) {
    item.command = routed;
    return item;
  }
  return routed as T;
}

export function currentSettings(): MachineSettings {
  const cfg = vscode.workspace.getConfiguration("machine", vscode.workspace.workspaceFolders?.[0]);
  return readSettings(
    (k) => cfg.get(k),
    (k) => {
      const i = cfg.inspect(k);
      return i !== undefined && [i.globalValue, i.workspaceValue, i.workspaceFolderValue].some((v) => v !== undefined);
    },
  );
}

export function workspaceFolderPath(): string | undefined {
  return vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
}

interface PythonExtensionApi {
  environments?: {
    getActiveEnvironmentPath?: (resource?: vscode.Uri) => { path: string } | undefined;
    resolveEnvironment?: (env: { path: string } | string) => Promise<{ executable?: { uri?: vscode.Uri } } | undefined>;
  };
  settings?: { getExecutionDetails?: (resource?: vscode.Uri) => { execCommand?: string[] } | undefined };
}

/** The Python extension's active interpreter, when that extension is installed. */
async function pythonExtensionInterpreter(resource: vscode.Uri | undefined): Promise<string | undefined> {
  const ext = vscode.extensions.getExtension<PythonExtensionApi>("ms-python.python");
  if (!ext) return undefined;
  try {
    const api = ext.isActive ? ext.exports : await ext.activate();
    const envPath = api.environments?.getActiveEnvironmentPath?.(resource);
    if (envPath && api.environments?.resolveEnvironment) {
      const resolved = await api.environments.resolveEnvironment(envPath);
      const exe = resolved?.executable?.uri?.fsPath;
      if (exe) return exe;
    }
    const exec = api.settings?.getExecutionDetails?.(resource)?.execCommand;
    if (exec?.[0]) return exec[0];
  } catch {
    // the Python extension failed: fall back to python3
  }
  return undefined;
}

function preflight(interp: Interpreter, cwd: string | undefined): Promise<PreflightOutcome> {
  return new Promise((resolve) => {
    execFile(interp.command, ["-c", PREFLIGHT_SCRIPT], { cwd, timeout: 20_000 }, (err, _stdout, stderr) => {
      if (!err) {
        resolve({ exitCode: 0 });
        return;
      }
      const e = err as NodeJS.ErrnoException & { code?: string | number };
      if (typeof e.code === "string") resolve({ errorCode: e.code, stderr });
      else resolve({ exitCode: typeof e.code === "number" ? e.code : null, stderr });
    });
  });
}

export class ServerManager implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private readonly policy = new RestartPolicy();
  private settings: MachineSettings;
  private stopping = false;
  private starting: Promise<LanguageClient | undefined> | undefined;
  private readonly disposables: vscode.Disposable[] = [];
  private readonly clientListeners: ((client: LanguageClient) => void)[] = [];
  private restartTimer: NodeJS.Timeout | undefined;
  private generation = 0;

  constructor(
    private readonly context: vscode.ExtensionContext,
    readonly output: vscode.LogOutputChannel,
  ) {
    this.settings = currentSettings();
    this.disposables.push(
      vscode.workspace.onDidChangeConfiguration((e) => {
        if (e.affectsConfiguration("machine")) void this.onConfigChanged();
      }),
      context.secrets.onDidChange((e) => {
        if (e.key === TINKER_SECRET) void this.restart("Tinker key changed");
      }),
    );
  }

  /** Called with every new client once it runs (to attach notification handlers). */
  onClient(listener: (client: LanguageClient) => void): void {
    this.clientListeners.push(listener);
    if (this.client?.state === State.Running) listener(this.client);
  }

  /** The running client, starting the server if needed; undefined when it cannot start (the user was told). */
  async ensureClient(): Promise<LanguageClient | undefined> {
    if (this.client?.state === State.Running) return this.client;
    this.starting ??= this.start().finally(() => {
      this.starting = undefined;
    });
    return this.starting;
  }

  private async start(): Promise<LanguageClient | undefined> {
    this.stopping = false;
    const generation = ++this.generation;
    const folder = vscode.workspace.workspaceFolders?.[0];
    this.settings = currentSettings();
    const interp = chooseInterpreter({
      setting: this.settings.python,
      pythonExtension: this.settings.python ? undefined : await pythonExtensionInterpreter(folder?.uri),
      workspaceFolder: folder?.uri.fsPath,
      home: os.homedir(),
    });
    this.output.appendLine(`[machine] interpreter: ${interp.command} (${interp.source})`);
    const problem = explainPreflight(interp, await preflight(interp, folder?.uri.fsPath));
    if (problem) {
      this.output.appendLine(`[machine] cannot start the server: ${problem.message}`);
      void this.reportStartProblem(problem.message, problem.installCommand);
      return undefined;
    }

    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env)) if (v !== undefined) env[k] = v;
    env.PYTHONUNBUFFERED = "1";
    if (!env.TINKER_API_KEY) {
      const key = await this.context.secrets.get(TINKER_SECRET);
      if (key) env.TINKER_API_KEY = key; // only into the child's environment; never logged or sent as a setting
    }
    const serverOptions: ServerOptions = {
      command: interp.command,
      args: serverArgs(), // stdio; no transport kind, which would append --stdio
      options: { cwd: folder?.uri.fsPath, env },
    };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [
        { scheme: "file", language: "jsonl" },
        { scheme: "file", pattern: "**/*.jsonl" },
        { scheme: "untitled", language: "jsonl" },
      ],
      outputChannel: this.output,
      initializationOptions: toServerOptions(this.settings),
      errorHandler: {
        error: (_error, _message, count) => ({ action: (count ?? 0) <= 3 ? ErrorAction.Continue : ErrorAction.Shutdown }),
        closed: () => this.onClosed(generation),
      },
      middleware: {
        // Code actions that need an answer (note, rewrite, prompt) run through a client command that asks first.
        provideCodeActions: async (document, range, context, token, next) => {
          const items = await next(document, range, context, token);
          return items?.map(routeAskingActions);
        },
        resolveCodeAction: async (item, token, next) => {
          const resolved = await next(item, token);
          return resolved ? routeAskingActions(resolved) : resolved;
        },
      },
      initializationFailedHandler: (error) => {
        this.output.appendLine(`[machine] initialize failed: ${String(error)}`);
        return false;
      },
    };
    const client = new LanguageClient("machine", "Machine", serverOptions, clientOptions);
    this.client = client;
    try {
      await client.start();
    } catch (err) {
      this.output.appendLine(`[machine] the server did not start: ${String(err)}`);
      void this.reportStartProblem(`machine-lsp failed to start with ${interp.command}: ${String(err)}`);
      return undefined;
    }
    for (const l of this.clientListeners) l(client);
    return client;
  }

  private onClosed(generation: number): { action: CloseAction; handled: boolean } {
    if (this.stopping || generation !== this.generation) return { action: CloseAction.DoNotRestart, handled: true };
    const delay = this.policy.onCrash(Date.now());
    if (delay === undefined) {
      this.output.appendLine("[machine] the server keeps crashing; not restarting it.");
      void vscode.window
        .showErrorMessage("machine-lsp crashed repeatedly and was not restarted.", "Show Log", "Restart")
        .then((pick) => {
          if (pick === "Show Log") this.output.show();
          if (pick === "Restart") void this.restart("user");
        });
      return { action: CloseAction.DoNotRestart, handled: true };
    }
    this.output.appendLine(`[machine] the server exited; restarting in ${delay} ms (crash ${this.policy.recentCrashes}).`);
    clearTimeout(this.restartTimer);
    this.restartTimer = setTimeout(() => {
      void this.restart("crash", false);
    }, delay);
    return { action: CloseAction.DoNotRestart, handled: true };
  }

  private async reportStartProblem(message: string, installCommand?: string): Promise<void> {
    const actions = ["Set Interpreter", "Show Log", ...(installCommand ? ["Copy Install Command"] : [])];
    const pick = await vscode.window.showErrorMessage(message, ...actions);
    if (pick === "Set Interpreter") await vscode.commands.executeCommand("workbench.action.openSettings", "machine.python");
    else if (pick === "Show Log") this.output.show();
    else if (pick === "Copy Install Command" && installCommand) await vscode.env.clipboard.writeText(installCommand);
  }

  async restart(reason: string, resetPolicy = true): Promise<void> {
    this.output.appendLine(`[machine] restarting the server (${reason}).`);
    if (resetPolicy) this.policy.reset();
    await this.stop();
    await this.ensureClient();
  }

  private async onConfigChanged(): Promise<void> {
    const next = currentSettings();
    const restart = needsRestart(this.settings, next);
    this.settings = next;
    if (restart) {
      await this.restart("machine.python changed");
      return;
    }
    const client = this.client;
    if (client?.state === State.Running) {
      await client.sendNotification(DidChangeConfigurationNotification.type, { settings: { machine: toServerOptions(next) } });
    }
  }

  async stop(): Promise<void> {
    this.stopping = true;
    clearTimeout(this.restartTimer);
    const client = this.client;
    this.client = undefined;
    if (!client) return;
    try {
      if (client.state !== State.Stopped) await client.stop(5000);
    } catch (err) {
      this.output.appendLine(`[machine] stopping the server: ${String(err)}`);
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
