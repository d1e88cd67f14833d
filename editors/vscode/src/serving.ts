/**
 * Serve Checkpoint… / Stop Serving / Use Checkpoint in Agent… / Start and Stop Local Tinker Server, and their two
 * status-bar items. Thin: the server runs both servers (machine.serve.*, machine.tinker.*); src/logic/serving.ts
 * decides what to offer and show.
 */
import * as crypto from "node:crypto";
import * as vscode from "vscode";
import { ExecuteCommandRequest, WorkDoneProgress, type WorkDoneProgressBegin, type WorkDoneProgressReport } from "vscode-languageclient/node";
import { SERVER_COMMANDS } from "./logic/args";
import type { JobEvent, JobState } from "./logic/jobs";
import { AGENTS, applyServeEvent, checkpointChoices, openaiBase, servedFromReply, servedMenu, servedStatus, serveArgs, tinkerServeArgs, tinkerStatus, useArgs, useDetail, type ServedState } from "./logic/serving";
import type { TinkerServerReply } from "./generated/replies";
import type { Commands } from "./commands";
import type { ServerManager } from "./server";
import { refusedUntilTrusted } from "./trust";

class UserCancelled extends Error {}

export class ServingView implements vscode.Disposable {
  private readonly served: vscode.StatusBarItem;
  private readonly tinker: vscode.StatusBarItem;
  private state: ServedState = { status: "stopped" };
  private tinkerState: TinkerServerReply | undefined;
  /** Told each served state (the Machine status item shows the served checkpoint). */
  onServed: ((st: ServedState) => void) | undefined;

  constructor(
    private readonly server: ServerManager,
    private readonly commands: Commands,
  ) {
    this.served = vscode.window.createStatusBarItem("machineLsp.served", vscode.StatusBarAlignment.Left, 9);
    this.served.name = "Machine Served Checkpoint";
    this.served.command = "machineLsp.servedMenu";
    this.tinker = vscode.window.createStatusBarItem("machineLsp.tinkerServer", vscode.StatusBarAlignment.Left, 8);
    this.tinker.name = "Machine Local Tinker Server";
    this.tinker.command = "machineLsp.tinkerMenu";
  }

  register(): vscode.Disposable[] {
    const reg = (id: string, fn: () => Promise<unknown>): vscode.Disposable =>
      vscode.commands.registerCommand(id, async () => {
        if (refusedUntilTrusted(id)) return undefined;
        try {
          return await fn();
        } catch (err) {
          if (err instanceof UserCancelled) return undefined;
          const shown = typeof err === "object" && err !== null && (err as { data?: { shown?: unknown } }).data?.shown === true;
          const msg = err instanceof Error ? err.message : String(err);
          this.server.output.info(`${id}: ${msg}`);
          if (!shown) void vscode.window.showErrorMessage(`Machine: ${msg}`); // else the server showed it
          return undefined;
        }
      });
    return [
      reg("machineLsp.serveCheckpoint", () => this.serve()),
      reg("machineLsp.stopServing", () => this.stop()),
      reg("machineLsp.useCheckpoint", () => this.use()),
      reg("machineLsp.servedMenu", () => this.servedMenu()),
      reg("machineLsp.startTinkerServer", () => this.startTinker()),
      reg("machineLsp.stopTinkerServer", () => this.stopTinker()),
      reg("machineLsp.tinkerMenu", () => this.tinkerMenu()),
    ];
  }

  /** machine/jobEvent of every job: the serve job's start, ready and end move the served item. */
  onJobEvent(_st: JobState, ev: JobEvent): void {
    const next = applyServeEvent(this.state, ev);
    if (next !== this.state) this.render(next);
  }

  /** A (re)started language server: ask both servers' state (a restarted server serves nothing). */
  async refresh(): Promise<void> {
    if (!vscode.workspace.isTrusted) return; // Restricted Mode: nothing is served
    try {
      this.render(servedFromReply(await this.commands.call(SERVER_COMMANDS.serveStatus, {})));
      this.renderTinker(await this.commands.call(SERVER_COMMANDS.tinkerStatus, {}));
    } catch (err) {
      this.server.output.warn(`serving status: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  private render(st: ServedState): void {
    this.state = st;
    this.onServed?.(st);
    const item = servedStatus(st);
    this.served.text = item.text;
    this.served.tooltip = item.tooltip;
    if (item.visible) this.served.show();
    else this.served.hide();
  }

  private renderTinker(r: TinkerServerReply | undefined): void {
    this.tinkerState = r;
    const item = tinkerStatus(r);
    this.tinker.text = item.text;
    this.tinker.tooltip = item.tooltip;
    if (item.visible) this.tinker.show();
    else this.tinker.hide();
  }

  private async pickCheckpoint(purpose: "serve" | "use", title: string): Promise<string> {
    const items = checkpointChoices(await this.commands.recentCheckpoints(), purpose);
    const pick = await vscode.window.showQuickPick(items, { title, placeHolder: "Checkpoint", matchOnDetail: true, matchOnDescription: true });
    if (!pick) throw new UserCancelled();
    return pick.checkpoint;
  }

  private async serve(): Promise<void> {
    const checkpoint = await this.pickCheckpoint("serve", "Machine: Serve Checkpoint");
    const port = vscode.workspace.getConfiguration("machine").get<number>("serve.port", 8765);
    const args = serveArgs(checkpoint, port);
    const reply = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: `Machine: serving ${checkpoint}`, cancellable: true },
      async (progress, token) => {
        progress.report({ message: "loading the model…" });
        return this.commands.call(SERVER_COMMANDS.serveStart, args, token);
      },
    );
    this.render(servedFromReply(reply));
    if (reply.status !== "serving" || !reply.url) {
      void vscode.window.showInformationMessage(`Machine: ${reply.message}`);
      return;
    }
    const pick = await vscode.window.showInformationMessage(`Machine: ${reply.message}`, "Copy URL", "Use in Agent…");
    if (pick === "Copy URL") await vscode.env.clipboard.writeText(openaiBase(reply.url));
    if (pick === "Use in Agent…") await this.use();
  }

  private async stop(): Promise<void> {
    const reply = await this.commands.call(SERVER_COMMANDS.serveStop, {});
    this.render(servedFromReply(reply));
    // A stopped job's outcome is shown by the server (window/showMessage); only "nothing to stop" is ours.
    if (!reply.job_id) void vscode.window.showInformationMessage(`Machine: ${reply.message}`);
  }

  private async servedMenu(): Promise<void> {
    const items = servedMenu(this.state);
    if (!items.length) return;
    const pick = await vscode.window.showQuickPick(items, { title: `Machine: ${this.state.checkpoint ?? "served checkpoint"}` });
    if (!pick) return;
    if (pick.action === "copy" && this.state.url) {
      await vscode.env.clipboard.writeText(openaiBase(this.state.url));
      void vscode.window.showInformationMessage(`Machine: copied ${openaiBase(this.state.url)}`);
    } else if (pick.action === "use") await this.use();
    else if (pick.action === "stop") await this.stop();
  }

  private async use(): Promise<void> {
    const checkpoint = this.state.status !== "stopped" && this.state.checkpoint ? this.state.checkpoint : await this.pickCheckpoint("use", "Machine: Use Checkpoint in Agent");
    const agent = await vscode.window.showQuickPick([...AGENTS], { title: `Machine: use ${checkpoint} in…`, placeHolder: "Agent" });
    if (!agent) throw new UserCancelled();
    const preview = await this.commands.call(SERVER_COMMANDS.use, useArgs(checkpoint, agent, false));
    const write = await vscode.window.showInformationMessage(`Machine: configure ${agent} to use ${preview.checkpoint}?`, { modal: true, detail: useDetail(preview) }, "Write");
    if (write !== "Write") return;
    const done = await this.commands.call(SERVER_COMMANDS.use, useArgs(checkpoint, agent, true));
    void vscode.window.showInformationMessage(`Machine: ${done.message}`);
  }

  private async startTinker(): Promise<void> {
    const client = await this.server.ensureClient();
    if (!client) throw new Error("the machine-lsp server is not running (see “Machine: Show Server Log”).");
    const reply = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: "Machine: local Tinker server", cancellable: true },
      async (progress, token) => {
        const workDoneToken = `machine-vscode-${crypto.randomUUID()}`;
        const sub = client.onProgress(WorkDoneProgress.type, workDoneToken, (p) => {
          if (p.kind === "end") return;
          const q: WorkDoneProgressBegin | WorkDoneProgressReport = p;
          if (q.message) progress.report({ message: q.message });
        });
        try {
          const arg = tinkerServeArgs(undefined, undefined);
          return (await client.sendRequest(ExecuteCommandRequest.type, { command: SERVER_COMMANDS.tinkerServe, arguments: [arg], workDoneToken }, token)) as TinkerServerReply;
        } finally {
          sub.dispose();
        }
      },
    );
    this.renderTinker(reply);
    if (reply.status === "running" && reply.base_url) {
      const pick = await vscode.window.showInformationMessage(`Machine: ${reply.message}; --engine tinker uses it (machine.toml [tinker] base_url)`, "Copy URL");
      if (pick === "Copy URL") await vscode.env.clipboard.writeText(reply.base_url);
    } else void vscode.window.showInformationMessage(`Machine: ${reply.message}`);
  }

  private async stopTinker(): Promise<void> {
    const reply = await this.commands.call(SERVER_COMMANDS.tinkerStop, {});
    this.renderTinker(reply);
    void vscode.window.showInformationMessage(`Machine: ${reply.message}`);
  }

  private async tinkerMenu(): Promise<void> {
    const url = this.tinkerState?.base_url;
    const log = this.tinkerState?.log;
    const items = [
      ...(url ? [{ label: "$(copy) Copy TINKER_BASE_URL", description: url, id: "copy" }] : []),
      ...(log ? [{ label: "$(output) Open Server Log", description: log, id: "log" }] : []),
      { label: "$(debug-stop) Stop Local Tinker Server", description: "", id: "stop" },
    ];
    const pick = await vscode.window.showQuickPick(items, { title: "Machine: local Tinker server" });
    if (pick?.id === "copy" && url) await vscode.env.clipboard.writeText(url);
    if (pick?.id === "log" && log) await vscode.window.showTextDocument(vscode.Uri.file(log));
    if (pick?.id === "stop") await this.stopTinker();
  }

  dispose(): void {
    this.served.dispose();
    this.tinker.dispose();
  }
}
