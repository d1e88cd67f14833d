/**
 * Arguments of the server's `machine.*` commands (workspace/executeCommand). Each command takes one object
 * argument with snake_case keys, the same names as the CLI's options. Pure: no `vscode` import.
 */
import * as path from "node:path";
import type { MachineSettings } from "./settings";

export const SERVER_COMMANDS = {
  tag: "machine.tag",
  tagged: "machine.tagged",
  data: "machine.data",
  validate: "machine.validate",
  scaffold: "machine.train.sft",
  smoke: "machine.train.smoke",
  train: "machine.train.run",
  retrain: "machine.retrain",
  trainPreferences: "machine.train.preferences",
  retag: "machine.retag",
  evalInit: "machine.eval.init",
  baseline: "machine.eval.baseline",
  evalCheckpoint: "machine.eval.checkpoint",
  compare: "machine.eval.compare",
  probe: "machine.eval.probe",
  jobsList: "machine.jobs.list",
  jobsCancel: "machine.jobs.cancel",
  serveStart: "machine.serve.start",
  serveStop: "machine.serve.stop",
  serveStatus: "machine.serve.status",
  use: "machine.use",
  tinkerServe: "machine.tinker.serve",
  tinkerStatus: "machine.tinker.status",
  tinkerStop: "machine.tinker.stop",
} as const;

export type ServerCommand = (typeof SERVER_COMMANDS)[keyof typeof SERVER_COMMANDS];

export type Verdict = "good" | "bad";

export interface TagInput {
  uri: string;
  /** 0-based line of the cursor, as VS Code counts. */
  line: number;
  verdict: Verdict;
  note?: string | undefined;
  rewrite?: string | undefined;
  trace?: boolean | undefined;
}

export function tagArgs(t: TagInput): Record<string, unknown> {
  const out: Record<string, unknown> = { uri: t.uri, line: t.line + 1, verdict: t.verdict };
  const note = t.note?.trim();
  if (note) out.note = note;
  if (t.rewrite !== undefined) {
    if (!t.rewrite.trim()) throw new Error("The rewrite is empty.");
    out.rewrite = t.rewrite;
  }
  if (t.trace) out.trace = true;
  return out;
}

export interface SelectionInput {
  uri: string;
  /** The selection as VS Code gives it (0-based lines, UTF-16 characters: the LSP position encoding). */
  range: { start: { line: number; character: number }; end: { line: number; character: number } };
  /** The selected text (only checked here; the server reads the document itself). */
  text: string;
  prompt: string;
  verdict: Verdict;
  note?: string | undefined;
}

/** Tagging a selection in any file: the selection is the answer, the prompt comes from the user. */
export function selectionArgs(s: SelectionInput): Record<string, unknown> {
  if (!s.text.trim()) throw new Error("Select the assistant answer to tag first.");
  if (!s.prompt.trim()) throw new Error("The prompt is empty.");
  const out: Record<string, unknown> = {
    uri: s.uri,
    verdict: s.verdict,
    prompt: s.prompt,
    range: { start: { ...s.range.start }, end: { ...s.range.end } },
  };
  const note = s.note?.trim();
  if (note) out.note = note;
  return out;
}

/** Resolves a path setting against the workspace folder; empty stays undefined (the server's default). */
export function resolvePath(p: string, workspaceFolder: string | undefined): string | undefined {
  if (!p) return undefined;
  if (path.isAbsolute(p) || !workspaceFolder) return p;
  return path.join(workspaceFolder, p);
}

export type JobKind = "smoke" | "train" | "retrain" | "baseline" | "evalCheckpoint" | "probe";

export interface JobInput {
  kind: JobKind;
  settings: MachineSettings;
  workspaceFolder?: string | undefined;
  checkpoint?: string | undefined;
}

/**
 * Arguments of the training and evaluation verbs. Only what the user set is sent (the job's argument structs
 * reject unknown keys; unset values come from the project's machine.toml). `yes` skips the server's
 * confirmation when the user turned `machine.confirmPaidRuns` off.
 */
export function jobArgs(j: JobInput): Record<string, unknown> {
  const s = j.settings;
  const out: Record<string, unknown> = {};
  if (s.engine) out.engine = s.engine;
  if (s.baseModel) out.model = s.baseModel;
  if (s.threads > 0) out.threads = s.threads;
  // retrain always trains on the store and evaluates its own held-out rows: no data argument
  const data = j.kind === "smoke" || j.kind === "train" ? resolvePath(s.trainPath, j.workspaceFolder) : j.kind === "probe" || j.kind === "retrain" ? undefined : resolvePath(s.evalPath, j.workspaceFolder);
  if (data) out.data = data;
  if (j.kind === "evalCheckpoint" || j.kind === "probe") {
    if (!j.checkpoint?.trim()) throw new Error("Pick a checkpoint first.");
    out.checkpoint = j.checkpoint.trim();
  }
  if (!s.confirmPaidRuns) out.yes = true;
  return out;
}

/** `machine.train.sft` writes machine.toml and a training script: only the engine and model are ours to say. */
export function scaffoldArgs(s: MachineSettings): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (s.engine) out.engine = s.engine;
  if (s.baseModel) out.model = s.baseModel;
  return out;
}

/** machine.validate's argument; `text` is the editor's buffer (unsaved edits, untitled files), validated as is. */
export function validateArgs(uri: string, evalUri?: string, text?: string): Record<string, unknown> {
  return { uri, ...(evalUri ? { eval_uri: evalUri } : {}), ...(text !== undefined ? { text } : {}) };
}

export function compareArgs(a: string, b: string): Record<string, unknown> {
  if (a === b) throw new Error("Pick two different result files.");
  return { a, b };
}

export function cancelArgs(jobId: string): Record<string, unknown> {
  return { job_id: jobId };
}

/** A checkpoint found in a run manifest (.machine/runs/<id>/manifest.json). */
export interface CheckpointChoice {
  address: string;
  label: string;
  description: string;
  /** for sorting: newest first */
  sortKey: string;
}

/** Extracts the checkpoints of one run manifest; tolerant of missing fields. */
export function checkpointsFromManifest(runId: string, manifest: unknown): CheckpointChoice[] {
  if (typeof manifest !== "object" || manifest === null) return [];
  const m = manifest as Record<string, unknown>;
  const list = Array.isArray(m.checkpoints) ? m.checkpoints : [];
  const created = typeof m.created_at === "string" ? m.created_at : typeof m.started_at === "string" ? m.started_at : "";
  const engine = typeof m.engine === "string" ? m.engine : "";
  const out: CheckpointChoice[] = [];
  list.forEach((c: unknown, i: number) => {
    if (typeof c !== "object" || c === null) return;
    const r = c as Record<string, unknown>;
    const address = typeof r.address === "string" ? r.address : undefined;
    if (!address) return;
    const name = typeof r.name === "string" ? r.name : address;
    const step = typeof r.step === "number" ? ` · step ${r.step}` : "";
    out.push({
      address,
      label: `${runId} / ${name}`,
      description: [engine, created].filter(Boolean).join(" · ") + step,
      sortKey: `${created}|${runId}|${String(i).padStart(6, "0")}`,
    });
  });
  return out;
}

/** What a server code action still needs from the user before `machine.tag` can run. */
export type AskKind = "note" | "rewrite" | "prompt";

/**
 * The server's "…with note…", "…with rewrite…" and "Tag selection as …" code actions carry `ask` in their
 * `machine.tag` argument: the editor must ask the user first. Returns what to ask, or undefined.
 */
export function tagAskKind(command: string, args: readonly unknown[] | undefined): AskKind | undefined {
  if (command !== SERVER_COMMANDS.tag || !args || args.length !== 1) return undefined;
  const a: unknown = args[0];
  if (typeof a !== "object" || a === null) return undefined;
  const ask = (a as { ask?: unknown }).ask;
  return ask === "note" || ask === "rewrite" || ask === "prompt" ? ask : undefined;
}

/**
 * The server's plain "Tag … as good/bad" actions carry `offer: "note"` for clients that ask the user: a note is
 * offered, and an empty answer (Enter) or none (Escape) tags without one. True for such a `machine.tag` call.
 */
export function tagOffersNote(command: string, args: readonly unknown[] | undefined): boolean {
  if (command !== SERVER_COMMANDS.tag || !args || args.length !== 1 || tagAskKind(command, args)) return false;
  const a: unknown = args[0];
  return typeof a === "object" && a !== null && (a as { offer?: unknown }).offer === "note";
}

/** The first argument of ASK_AND_TAG_COMMAND for an offered (skippable) note, beside the AskKind of an `ask`. */
export const OFFER_NOTE = "offer-note";

/** A tag's argument with the offered note: the note when one was typed, and `offer` dropped either way. */
export function withOfferedNote(arg: Record<string, unknown>, note: string | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = { ...arg };
  delete out.offer;
  const typed = note?.trim();
  if (typed) out.note = typed;
  return out;
}

/** The note box every tag action shows (skippable): its title names what is being tagged. */
export function noteBox(verdict: Verdict, what: string): { title: string; prompt: string; placeHolder: string } {
  return {
    title: `Machine: Tag ${what} as ${verdict}`,
    prompt: "A note for this tag (why it is good or bad). Enter or Escape: tag without a note.",
    placeHolder: "optional note",
  };
}

/** The `machine.tag` argument with the user's answer filled in (and `ask` dropped). */
export function answerAsk(arg: Record<string, unknown>, kind: AskKind, answer: string): Record<string, unknown> {
  if (!answer.trim()) throw new Error(`The ${kind} is empty.`);
  const out: Record<string, unknown> = { ...arg, [kind]: answer };
  delete out.ask;
  return out;
}

/** The client command that asks and then runs `machine.tag`. */
export const ASK_AND_TAG_COMMAND = "machineLsp.tagAsk";

/** What *Machine: Train with Preferences…* offers: the server's `machine.train.preferences` objectives. */
export const PREFERENCE_OBJECTIVES = [
  { label: "DPO", objective: "dpo", detail: "pairs: each rewrite against the model's answer, a good and a bad answer to one prompt" },
  { label: "KTO", objective: "kto", detail: "every good and bad tag, no pairs needed" },
  { label: "SFT then DPO", objective: "sft+dpo", detail: "SFT on the good rows, then DPO on the pairs from its adapter" },
] as const;

export type PreferenceObjective = (typeof PREFERENCE_OBJECTIVES)[number]["objective"];

/**
 * `machine.train.preferences`' argument: the training run's (jobArgs "train") with the objective. DPO and KTO
 * train on the store's pairs and tags, so the SFT training file setting is dropped; SFT then DPO keeps it for
 * its SFT stage.
 */
export function preferenceArgs(train: Record<string, unknown>, objective: string): Record<string, unknown> {
  if (!PREFERENCE_OBJECTIVES.some((o) => o.objective === objective)) throw new Error(`unknown preference objective: ${objective}`);
  const out: Record<string, unknown> = { ...train, objective };
  if (objective !== "sft+dpo") delete out.data;
  return out;
}

/** The server's *Add a rewrite…* code action: `machine.retag` carrying `ask: "rewrite"` (ask for the better answer). */
export function retagAskKind(command: string, args: readonly unknown[] | undefined): "rewrite" | undefined {
  if (command !== SERVER_COMMANDS.retag || !args || args.length !== 1) return undefined;
  const a: unknown = args[0];
  if (typeof a !== "object" || a === null) return undefined;
  return (a as { ask?: unknown }).ask === "rewrite" ? "rewrite" : undefined;
}

/** The client command that asks for the rewrite and then runs `machine.retag`. */
export const ASK_AND_RETAG_COMMAND = "machineLsp.retagAsk";
