/**
 * The Machine status item (like ruff's): a status-bar item and the JSON Lines language status item, both from
 * logic/status.ts statusView; a click shows the server log.
 */
import * as vscode from "vscode";
import type { JobsView } from "./jobsView";
import { currentJob } from "./logic/jobs";
import type { ServedState } from "./logic/serving";
import { statusView } from "./logic/status";
import type { ServerManager } from "./server";

const SEVERITY = { info: vscode.LanguageStatusSeverity.Information, warning: vscode.LanguageStatusSeverity.Warning, error: vscode.LanguageStatusSeverity.Error } as const;

export class MachineStatus implements vscode.Disposable {
  private readonly bar: vscode.StatusBarItem;
  private readonly language: vscode.LanguageStatusItem;
  private served: ServedState = { status: "stopped" };

  constructor(
    private readonly server: ServerManager,
    private readonly jobs: JobsView,
  ) {
    this.bar = vscode.window.createStatusBarItem("machineLsp.status", vscode.StatusBarAlignment.Right, 100);
    this.bar.name = "Machine";
    this.bar.command = "machineLsp.showOutput";
    this.language = vscode.languages.createLanguageStatusItem("machineLsp.status", [{ language: "jsonl" }, { pattern: "**/*.jsonl" }]);
    this.language.name = "Machine";
    this.language.command = { title: "Show Log", command: "machineLsp.showOutput" };
    server.onState(() => {
      this.render();
    });
    jobs.onEvent(() => {
      this.render();
    });
    this.render();
    this.bar.show();
  }

  /** The serving view's state (the checkpoint served, from machine.serve.status and the serve job's events). */
  setServed(st: ServedState): void {
    this.served = st;
    this.render();
  }

  render(): void {
    const view = statusView({
      server: this.server.state,
      problem: this.server.problem ?? this.server.trainingProblem(),
      serverInfo: this.server.serverInfo,
      interpreter: this.server.runtime?.interpreter.command,
      restricted: !vscode.workspace.isTrusted,
      served: this.served,
      job: currentJob(this.jobs.jobs),
    });
    this.bar.text = view.text;
    this.bar.tooltip = view.tooltip;
    this.bar.backgroundColor = view.severity === "error" ? new vscode.ThemeColor("statusBarItem.errorBackground") : view.severity === "warning" ? new vscode.ThemeColor("statusBarItem.warningBackground") : undefined;
    this.language.text = "Machine";
    this.language.detail = view.detail;
    this.language.severity = SEVERITY[view.severity];
    this.language.busy = view.busy;
  }

  dispose(): void {
    this.bar.dispose();
    this.language.dispose();
  }
}
