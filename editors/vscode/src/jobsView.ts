/** Tracks jobs from machine/jobEvent: the status-bar item, the outcome notification, listeners (the panel). */
import * as vscode from "vscode";
import { serverMessageActions } from "./logic/messageActions";
import { labelServerMessage } from "./logic/replies";
import { applyEvent, currentJob, runningIcon, isJobEvent, outcomeText, shownJob, statusText, statusTooltip, type JobEvent, type JobState } from "./logic/jobs";

export const JOB_EVENT_NOTIFICATION = "machine/jobEvent";

export class JobsView implements vscode.Disposable {
  readonly jobs = new Map<string, JobState>();
  private readonly item: vscode.StatusBarItem;
  private readonly listeners: ((st: JobState, ev: JobEvent) => void)[] = [];
  private readonly finishedWaiters = new Map<string, ((st: JobState) => void)[]>();
  private hideTimer: NodeJS.Timeout | undefined;

  constructor(private readonly output: vscode.LogOutputChannel) {
    this.item = vscode.window.createStatusBarItem("machineLsp.job", vscode.StatusBarAlignment.Left, 10);
    this.item.name = "Machine Job";
    this.item.command = "machineLsp.cancelJob";
  }

  onEvent(listener: (st: JobState, ev: JobEvent) => void): void {
    this.listeners.push(listener);
  }

  /** Resolves when the job ends (done, error or cancelled). */
  whenFinished(jobId: string): Promise<JobState> {
    const st = this.jobs.get(jobId);
    if (st && st.status !== "running") return Promise.resolve(st);
    return new Promise((resolve) => {
      const list = this.finishedWaiters.get(jobId) ?? [];
      list.push(resolve);
      this.finishedWaiters.set(jobId, list);
    });
  }

  handle(raw: unknown): void {
    if (!isJobEvent(raw)) return;
    const st = applyEvent(this.jobs, raw, Date.now());
    if (raw.event === "log") {
      const level = typeof raw.level === "string" ? raw.level : "info";
      const msg = `[job ${st.id}] ${typeof raw.message === "string" ? raw.message : ""}`;
      if (level === "error") this.output.error(msg);
      else if (level === "warning") this.output.warn(msg);
      else if (level === "debug") this.output.debug(msg);
      else this.output.info(msg);
    }
    for (const l of this.listeners) l(st, raw);
    this.render();
    if (st.status !== "running") {
      for (const w of this.finishedWaiters.get(st.id) ?? []) w(st);
      this.finishedWaiters.delete(st.id);
    }
  }

  running(): JobState[] {
    return [...this.jobs.values()].filter((j) => j.status === "running");
  }

  private render(): void {
    const cur = currentJob(this.jobs);
    clearTimeout(this.hideTimer);
    if (cur) {
      const more = this.running().length - 1;
      this.item.text = `${runningIcon(cur)} Machine: ${statusText(cur)}${more > 0 ? ` (+${more})` : ""}`;
      this.item.tooltip = statusTooltip(cur);
      this.item.command = "machineLsp.cancelJob";
      this.item.backgroundColor = undefined;
      this.item.show();
      return;
    }
    const last = shownJob(this.jobs);
    if (!last) {
      this.item.hide();
      return;
    }
    const icon = last.status === "done" ? "$(check)" : last.status === "cancelled" ? "$(circle-slash)" : "$(error)";
    this.item.text = `${icon} Machine: ${statusText(last)}`;
    this.item.tooltip = `${outcomeText(last)}\nClick to open the run panel.`;
    this.item.command = "machineLsp.openPanel";
    this.item.backgroundColor = last.status === "error" ? new vscode.ThemeColor("statusBarItem.errorBackground") : undefined;
    this.item.show();
    this.hideTimer = setTimeout(() => {
      this.item.hide();
    }, 30_000);
  }

  /**
   * Replaces the language client's window/showMessage handler: the same notifications, and for a job's outcome
   * (the server's last message about a job) the actions that belong to it. One notification per outcome.
   */
  showServerMessage(params: { type: number; message: string }): void {
    const job = [...this.jobs.values()].find((j) => j.status !== "running" && j.message === params.message);
    const text = labelServerMessage(params.message);
    if (params.type >= 4) {
      this.output.info(`[server] ${params.message}`);
      return;
    }
    const offered = serverMessageActions(params.message); // e.g. no eval data: Make Eval Set…; no embedded model: Create Training Environment
    const actions: string[] = offered.map((a) => a.title);
    if (job) {
      if (job.losses.length || job.evals.length) actions.push("Open Run Panel");
      if (job.status !== "done") actions.push("Show Log");
    }
    const show =
      params.type === 1
        ? vscode.window.showErrorMessage(text, ...actions)
        : params.type === 2
          ? vscode.window.showWarningMessage(text, ...actions)
          : vscode.window.showInformationMessage(text, ...actions);
    void show.then((pick) => {
      if (pick === "Open Run Panel") void vscode.commands.executeCommand("machineLsp.openPanel");
      if (pick === "Show Log") this.output.show();
      const action = offered.find((a) => a.title === pick);
      if (action) void vscode.commands.executeCommand(action.command);
    });
  }

  dispose(): void {
    clearTimeout(this.hideTimer);
    this.item.dispose();
  }
}
