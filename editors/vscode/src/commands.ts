/** The "Machine" palette commands: gather arguments, call the server's machine.* commands, show results. */
import * as crypto from "node:crypto";
import * as path from "node:path";
import * as vscode from "vscode";
import { ExecuteCommandRequest, WorkDoneProgress, type LanguageClient, type WorkDoneProgressBegin, type WorkDoneProgressReport } from "vscode-languageclient/node";
import {
  answerAsk,
  ASK_AND_RETAG_COMMAND,
  ASK_AND_TAG_COMMAND,
  OFFER_NOTE,
  withOfferedNote,
  cancelArgs,
  checkpointsFromManifest,
  compareArgs,
  jobArgs,
  PREFERENCE_OBJECTIVES,
  preferenceArgs,
  scaffoldArgs,
  selectionArgs,
  SERVER_COMMANDS,
  tagArgs,
  type ServerCommand,
  validateArgs,
  type AskKind,
  type CheckpointChoice,
  type JobKind,
  type Verdict,
} from "./logic/args";
import { compareView } from "./logic/compare";
import { cancellableJobs, dataPathText, isJob, scaffoldFileToOpen, serverShownError, type ReplyOf } from "./logic/replies";
import type { JobsView } from "./jobsView";
import type { RunPanel } from "./panel";
import { currentSettings, TINKER_SECRET, workspaceFolderPath, type ServerManager } from "./server";
import { offerNote } from "./sessions";
import type { TaggedView } from "./taggedView";
import type { TrainingEnvironment } from "./trainingEnv";
import { refusedUntilTrusted } from "./trust";
import { makeEvalSet } from "./evalSet";
import { MAKE_EVAL_SET_COMMAND } from "./logic/evalSet";

class UserCancelled extends Error {}

/** The commands that run a job and answer with its JobSummary (or JobDeclined). */
type JobCommand = (typeof SERVER_COMMANDS)["validate" | "smoke" | "train" | "retrain" | "trainPreferences" | "baseline" | "evalCheckpoint" | "probe"];

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

export class Commands {
  constructor(
    private readonly context: vscode.ExtensionContext,
    private readonly server: ServerManager,
    private readonly jobs: JobsView,
    private readonly panel: RunPanel,
    private readonly training: TrainingEnvironment,
    private readonly tagged: TaggedView,
  ) {}

  register(): vscode.Disposable[] {
    const reg = (id: string, fn: (...args: unknown[]) => Promise<unknown>): vscode.Disposable =>
      vscode.commands.registerCommand(id, async (...args: unknown[]) => {
        if (refusedUntilTrusted(id)) return undefined;
        try {
          return await fn(...args);
        } catch (err) {
          if (err instanceof UserCancelled) return undefined;
          const shown = serverShownError(err);
          if (shown !== undefined) {
            this.server.output.info(`${id}: ${shown}`); // the server showed it (window/showMessage)
            return undefined;
          }
          const msg = err instanceof Error ? err.message : String(err);
          this.server.output.error(`${id}: ${msg}`);
          void vscode.window.showErrorMessage(`Machine: ${msg}`);
          return undefined;
        }
      });
    return [
      reg("machineLsp.tagGood", () => this.tag("good")),
      reg("machineLsp.tagBad", () => this.tag("bad")),
      reg("machineLsp.tagRewrite", () => this.tagRewrite()),
      reg("machineLsp.tagSelection", () => this.tagSelection()),
      reg(ASK_AND_TAG_COMMAND, (kind, arg) => this.askAndTag(kind, arg)),
      reg("machineLsp.showTagged", () => this.showTagged()),
      reg("machineLsp.showDataPath", () => this.showDataPath()),
      reg("machineLsp.validate", () => this.validate()),
      reg("machineLsp.scaffold", () => this.scaffold()),
      reg("machineLsp.smoke", () => this.runJob("smoke", "Smoke run")),
      reg("machineLsp.train", () => this.runJob("train", "Training")),
      reg("machineLsp.retrain", () => this.runJob("retrain", "Retrain and reload")),
      reg("machineLsp.trainPreferences", () => this.trainPreferences()),
      reg(ASK_AND_RETAG_COMMAND, (_kind, arg) => this.askAndRetag(arg)),
      reg("machineLsp.baseline", () => this.runJob("baseline", "Baseline eval")),
      reg(MAKE_EVAL_SET_COMMAND, () => makeEvalSet(this.server)),
      reg("machineLsp.evalCheckpoint", () => this.evalCheckpoint("evalCheckpoint")),
      reg("machineLsp.compare", () => this.compare()),
      reg("machineLsp.probe", () => this.evalCheckpoint("probe")),
      reg("machineLsp.cancelJob", () => this.cancelJob()),
      reg("machineLsp.openPanel", () => {
        this.panel.show();
        return Promise.resolve();
      }),
      reg("machineLsp.setTinkerKey", () => this.setTinkerKey()),
      reg("machineLsp.clearTinkerKey", async () => {
        await this.context.secrets.delete(TINKER_SECRET);
        void vscode.window.showInformationMessage("Machine: the Tinker API key was removed from secret storage.");
      }),
      reg("machineLsp.restartServer", () => this.server.restart("user")),
      reg("machineLsp.createTrainingEnvironment", () => this.training.create()),
      reg("machineLsp.showOutput", () => {
        this.server.output.show();
        return Promise.resolve();
      }),
    ];
  }

  private async client(): Promise<LanguageClient> {
    const c = await this.server.ensureClient();
    if (!c) throw new Error("the machine-lsp server is not running (see “Machine: Show Server Log”).");
    return c;
  }

  /** workspace/executeCommand with one object argument; the reply has the type generated from the server's struct. */
  async call<C extends ServerCommand>(command: C, arg: Record<string, unknown>, token?: vscode.CancellationToken): Promise<ReplyOf<C>> {
    const client = await this.client();
    return (await client.sendRequest(ExecuteCommandRequest.type, { command, arguments: [arg] }, token)) as ReplyOf<C>;
  }

  private activeEditor(): vscode.TextEditor {
    const ed = vscode.window.activeTextEditor;
    if (!ed) throw new Error("open a chat JSONL file or a session log first.");
    return ed;
  }

  private async tag(verdict: Verdict, extra?: { note?: string; rewrite?: string }): Promise<unknown> {
    const ed = this.activeEditor();
    extra ??= { note: await offerNote(verdict, `line ${ed.selection.active.line + 1}`) };
    if (ed.document.isDirty) await ed.document.save();
    return this.call(SERVER_COMMANDS.tag, tagArgs({ uri: ed.document.uri.toString(), line: ed.selection.active.line, verdict, ...extra }));
  }

  private async tagRewrite(): Promise<unknown> {
    this.activeEditor();
    const rewrite = await vscode.window.showInputBox({
      title: "Machine: Tag with Rewrite",
      prompt: "The answer the assistant should have given (it replaces the answer; the original is kept).",
      ignoreFocusOut: true,
      validateInput: (v) => (v.trim() ? undefined : "The rewrite cannot be empty."),
    });
    if (rewrite === undefined) throw new UserCancelled();
    const note = await vscode.window.showInputBox({ title: "Machine: Tag with Rewrite", prompt: "A note (optional)", ignoreFocusOut: true });
    if (note === undefined) throw new UserCancelled();
    return this.tag("good", { rewrite, note });
  }

  /** Runs a server code action that needs a note, a rewrite or a prompt: ask, then call machine.tag. */
  private async askAndTag(kind: unknown, arg: unknown): Promise<unknown> {
    if (kind === OFFER_NOTE && isObj(arg)) {
      const verdict = arg.verdict === "bad" ? "bad" : "good";
      const line = typeof arg.line === "number" ? `line ${arg.line}` : "this row";
      return this.call(SERVER_COMMANDS.tag, withOfferedNote(arg, await offerNote(verdict, line)));
    }
    if ((kind !== "note" && kind !== "rewrite" && kind !== "prompt") || !isObj(arg)) throw new Error("bad tag arguments from the server");
    const prompts: Record<AskKind, string> = {
      note: "A note for this tag",
      rewrite: "The answer the assistant should have given (it replaces the answer; the original is kept)",
      prompt: "The prompt (user message) that the selection answers",
    };
    const answer = await vscode.window.showInputBox({
      title: `Machine: ${kind === "prompt" ? "Tag Selection" : `Tag with ${kind}`}`,
      prompt: prompts[kind],
      ignoreFocusOut: true,
      validateInput: (v) => (v.trim() ? undefined : `The ${kind} cannot be empty.`),
    });
    if (answer === undefined) throw new UserCancelled();
    const doc = vscode.workspace.textDocuments.find((d) => d.uri.toString() === arg.uri);
    if (doc?.isDirty && kind === "prompt") await doc.save();
    return this.call(SERVER_COMMANDS.tag, answerAsk(arg, kind, answer));
  }

  /** *Add a rewrite…* on a bad row: ask for the better answer, then `machine.retag` makes the row a pair. */
  private async askAndRetag(arg: unknown): Promise<unknown> {
    if (!isObj(arg) || typeof arg.id !== "string") throw new Error("bad retag arguments from the server");
    const answer = await vscode.window.showInputBox({
      title: "Machine: Add a Rewrite",
      prompt: "The better answer (the model's answer is kept: the two make a preference pair)",
      ignoreFocusOut: true,
      validateInput: (v) => (v.trim() ? undefined : "The rewrite cannot be empty."),
    });
    if (answer === undefined) throw new UserCancelled();
    return this.call(SERVER_COMMANDS.retag, answerAsk(arg, "rewrite", answer));
  }

  /** *Train with Preferences…*: pick DPO, KTO or SFT then DPO; the training run's job with that objective. */
  private async trainPreferences(): Promise<unknown> {
    const pick = await vscode.window.showQuickPick(
      PREFERENCE_OBJECTIVES.map((o) => ({ label: o.label, detail: o.detail, objective: o.objective })),
      { title: "Machine: Train with Preferences", placeHolder: "What to learn from the good and bad tags" },
    );
    if (!pick) throw new UserCancelled();
    if (!(await this.training.ready())) return undefined;
    const train = jobArgs({ kind: "train", settings: currentSettings(), workspaceFolder: workspaceFolderPath() });
    this.panel.show(true);
    return this.withJobProgress(`Training (${pick.label})`, SERVER_COMMANDS.trainPreferences, preferenceArgs(train, pick.objective));
  }

  private async tagSelection(): Promise<unknown> {
    const ed = this.activeEditor();
    const sel = ed.selection;
    const text = ed.document.getText(sel);
    if (sel.isEmpty || !text.trim()) throw new Error("select the assistant answer to tag first.");
    const verdicts: { label: string; verdict: Verdict }[] = [
      { label: "$(thumbsup) Good", verdict: "good" },
      { label: "$(thumbsdown) Bad", verdict: "bad" },
    ];
    const pick = await vscode.window.showQuickPick(
      verdicts,
      { title: "Machine: Tag Selection", placeHolder: "Verdict for the selected answer" },
    );
    if (!pick) throw new UserCancelled();
    const prompt = await vscode.window.showInputBox({
      title: "Machine: Tag Selection",
      prompt: "The prompt (user message) that the selection answers",
      ignoreFocusOut: true,
      validateInput: (v) => (v.trim() ? undefined : "The prompt cannot be empty."),
    });
    if (prompt === undefined) throw new UserCancelled();
    if (ed.document.isDirty) await ed.document.save(); // the server reads files it does not track from disk
    return this.call(
      SERVER_COMMANDS.tag,
      selectionArgs({
        uri: ed.document.uri.toString(),
        range: { start: { line: sel.start.line, character: sel.start.character }, end: { line: sel.end.line, character: sel.end.character } },
        text,
        prompt,
        verdict: pick.verdict,
      }),
    );
  }

  private async showTagged(): Promise<void> {
    const reply = await this.call(SERVER_COMMANDS.tagged, {});
    if (!reply.records.length) {
      void vscode.window.showInformationMessage("Machine: nothing is tagged yet.");
      return;
    }
    await this.tagged.show(); // the table: prompt, answer, verdict, note, harness, when; search; untag/retag
  }

  private async showDataPath(): Promise<void> {
    const reply = await this.call(SERVER_COMMANDS.data, {});
    const pick = await vscode.window.showInformationMessage(dataPathText(reply), "Open", "Copy Path");
    if (pick === "Copy Path") await vscode.env.clipboard.writeText(reply.store);
    if (pick === "Open") await vscode.window.showTextDocument(vscode.Uri.file(reply.store));
  }

  private async validate(): Promise<unknown> {
    // The editor's buffer as it is (unsaved edits, untitled files): the server validates this text, not the disk.
    const doc = this.activeEditor().document;
    const name = doc.isUntitled ? doc.uri.path : path.basename(doc.uri.fsPath);
    return this.withJobProgress(`Validating ${name}`, SERVER_COMMANDS.validate, validateArgs(doc.uri.toString(), undefined, doc.getText()));
  }

  private async scaffold(): Promise<void> {
    // A quick file write on the server (no job): it shows "wrote …" itself; we open the script it wrote.
    const reply = await this.call(SERVER_COMMANDS.scaffold, scaffoldArgs(currentSettings()));
    const file = scaffoldFileToOpen(reply);
    if (file) await vscode.window.showTextDocument(vscode.Uri.file(path.isAbsolute(file) ? file : path.join(workspaceFolderPath() ?? "", file)));
  }

  private async runJob(kind: JobKind, title: string, checkpoint?: string): Promise<unknown> {
    // Every job verb but validate loads a model: it needs the `train` extra in the server's interpreter.
    if (!(await this.training.ready())) return undefined;
    const args = jobArgs({ kind, settings: currentSettings(), workspaceFolder: workspaceFolderPath(), checkpoint });
    const command = {
      smoke: SERVER_COMMANDS.smoke,
      train: SERVER_COMMANDS.train,
      retrain: SERVER_COMMANDS.retrain,
      baseline: SERVER_COMMANDS.baseline,
      evalCheckpoint: SERVER_COMMANDS.evalCheckpoint,
      probe: SERVER_COMMANDS.probe,
    }[kind];
    if (kind === "smoke" || kind === "train" || kind === "retrain") this.panel.show(true);
    return this.withJobProgress(title, command, args);
  }

  /**
   * Runs a job command inside a cancellable notification. The language client sends executeCommand without a
   * work-done token, so we give one (the server reports on it) and forward cancellation as $/cancelRequest,
   * plus machine.jobs.cancel for the job the server started for us.
   */
  async withJobProgress(title: string, command: JobCommand, arg: Record<string, unknown>): Promise<ReplyOf<JobCommand> | undefined> {
    const client = await this.client();
    const startedBefore = new Set(this.jobs.jobs.keys());
    const ours = (): string[] => [...this.jobs.jobs.values()].filter((j) => !startedBefore.has(j.id) && j.status === "running").map((j) => j.id);
    return vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: `Machine: ${title}`, cancellable: true },
      async (progress, token): Promise<ReplyOf<JobCommand> | undefined> => {
        const workDoneToken = `machine-vscode-${crypto.randomUUID()}`;
        let lastPct = 0;
        const sub = client.onProgress(WorkDoneProgress.type, workDoneToken, (p) => {
          if (p.kind === "end") return;
          const q: WorkDoneProgressBegin | WorkDoneProgressReport = p;
          const pct = typeof q.percentage === "number" ? q.percentage : undefined;
          const increment = pct !== undefined && pct > lastPct ? pct - lastPct : undefined;
          if (pct !== undefined) lastPct = Math.max(lastPct, pct);
          progress.report({ ...(q.message ? { message: q.message } : {}), ...(increment !== undefined ? { increment } : {}) });
        });
        const cancelSub = token.onCancellationRequested(() => {
          for (const id of ours()) void this.call(SERVER_COMMANDS.jobsCancel, cancelArgs(id)).catch(() => undefined);
        });
        try {
          const reply = (await client.sendRequest(ExecuteCommandRequest.type, { command, arguments: [arg], workDoneToken }, token)) as ReplyOf<JobCommand>;
          // A job started with `wait: false` answers at once: keep the progress open until the job ends.
          if (isJob(reply) && (reply.status === "running" || reply.status === "starting") && this.jobs.jobs.get(reply.job_id)?.status === "running") {
            await Promise.race([
              this.jobs.whenFinished(reply.job_id),
              new Promise<undefined>((resolve) => token.onCancellationRequested(() => {
                resolve(undefined);
              })),
            ]);
          }
          return reply;
        } catch (err) {
          // A job that started and failed or was cancelled: the server already said so (window/showMessage).
          if (token.isCancellationRequested || ours().length > 0 || [...this.jobs.jobs.values()].some((j) => !startedBefore.has(j.id))) return undefined;
          throw err;
        } finally {
          sub.dispose();
          cancelSub.dispose();
        }
      },
    );
  }

  async recentCheckpoints(): Promise<CheckpointChoice[]> {
    const out: CheckpointChoice[] = [];
    const manifests = await vscode.workspace.findFiles(".machine/runs/*/manifest.json", null, 200);
    for (const uri of manifests) {
      try {
        const data: unknown = JSON.parse(Buffer.from(await vscode.workspace.fs.readFile(uri)).toString("utf8"));
        out.push(...checkpointsFromManifest(path.basename(path.dirname(uri.fsPath)), data));
      } catch {
        // a manifest being written: skip
      }
    }
    for (const j of this.jobs.jobs.values()) {
      for (const c of j.checkpoints) {
        if (!out.some((o) => o.address === c.address)) out.push({ address: c.address, label: `${j.id} / ${c.name}`, description: "this session", sortKey: `~${j.startedAt}` });
      }
    }
    return out.sort((a, b) => b.sortKey.localeCompare(a.sortKey));
  }

  private async evalCheckpoint(kind: "evalCheckpoint" | "probe"): Promise<unknown> {
    const title = kind === "probe" ? "Style-Bleed Probe" : "Evaluate Checkpoint";
    const enter = { label: "$(edit) Enter a checkpoint address…", description: "local://… or tinker://…", address: "" };
    const items = [...(await this.recentCheckpoints()).map((c) => ({ label: c.label, description: c.description, detail: c.address, address: c.address })), enter];
    const pick = await vscode.window.showQuickPick(items, { title: `Machine: ${title}`, placeHolder: "Checkpoint from a recent run", matchOnDetail: true });
    if (!pick) throw new UserCancelled();
    let address = pick.address;
    if (!address) {
      const typed = await vscode.window.showInputBox({
        title: `Machine: ${title}`,
        prompt: "Checkpoint address",
        placeHolder: "local://<run-id>/<name> or tinker://<run-id>/sampler_weights/<name>",
        ignoreFocusOut: true,
        validateInput: (v) => (/^(local|tinker):\/\/\S+$/.test(v.trim()) ? undefined : "An address starts with local:// or tinker://"),
      });
      if (typed === undefined) throw new UserCancelled();
      address = typed.trim();
    }
    return this.runJob(kind, title, address);
  }

  private async compare(): Promise<void> {
    const files = (await vscode.workspace.findFiles("**/eval_results/**/*.json", "**/node_modules/**", 500)).sort((a, b) => a.fsPath.localeCompare(b.fsPath));
    if (files.length < 2) throw new Error("Compare needs two result files in eval_results/ (run Baseline Eval and Evaluate Checkpoint first).");
    const items = files.map((u) => ({ label: path.basename(u.fsPath), description: vscode.workspace.asRelativePath(u), uri: u }));
    const a = await vscode.window.showQuickPick(items, { title: "Machine: Compare Results (1/2)", placeHolder: "Before (A), e.g. the baseline" });
    if (!a) throw new UserCancelled();
    const b = await vscode.window.showQuickPick(
      items.filter((i) => i.uri.fsPath !== a.uri.fsPath),
      { title: "Machine: Compare Results (2/2)", placeHolder: "After (B), e.g. the fine-tuned checkpoint" },
    );
    if (!b) throw new UserCancelled();
    const reply = await this.call(SERVER_COMMANDS.compare, compareArgs(a.uri.fsPath, b.uri.fsPath));
    this.panel.showComparison(compareView(reply));
  }

  private async cancelJob(): Promise<void> {
    const local = this.jobs.running();
    let listed: { id: string; label: string }[] = local.map((j) => ({ id: j.id, label: j.job }));
    if (!listed.length) {
      listed = cancellableJobs(await this.call(SERVER_COMMANDS.jobsList, {}));
    }
    if (!listed.length) {
      void vscode.window.showInformationMessage("Machine: no job is running.");
      return;
    }
    let id = listed[0]?.id;
    if (listed.length > 1) {
      const pick = await vscode.window.showQuickPick(listed.map((j) => ({ label: j.label, description: j.id, id: j.id })), { title: "Machine: Cancel Job" });
      if (!pick) throw new UserCancelled();
      id = pick.id;
    }
    if (id === undefined) return;
    await this.call(SERVER_COMMANDS.jobsCancel, cancelArgs(id));
  }

  private async setTinkerKey(): Promise<void> {
    const key = await vscode.window.showInputBox({
      title: "Machine: Tinker API Key",
      prompt: "Stored in VS Code's secret storage and passed to the server's environment only (TINKER_API_KEY).",
      password: true,
      ignoreFocusOut: true,
      validateInput: (v) => (v.trim().startsWith("tml-") ? undefined : "Tinker keys start with tml-"),
    });
    if (key === undefined) throw new UserCancelled();
    await this.context.secrets.store(TINKER_SECRET, key.trim());
    void vscode.window.showInformationMessage("Machine: Tinker API key stored; the server restarts to use it.");
  }
}
