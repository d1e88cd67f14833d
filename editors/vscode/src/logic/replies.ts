/**
 * What the extension shows from the server's machine.* replies. The reply types are generated from the server's
 * msgspec structs (src/generated/replies.ts), so a renamed field breaks the build here instead of silently showing
 * nothing. Pure: no `vscode` import.
 */
import type { DataReply, JobDeclined, JobPlan, JobSummary, JobsListReply, MachineCommandReplies, WroteReply } from "../generated/replies";

export type { MachineCommandReplies } from "../generated/replies";
export type ReplyOf<C extends keyof MachineCommandReplies> = MachineCommandReplies[C];

/** The file *Scaffold SFT Script* opens: the training script it wrote (`written` holds absolute paths). */
export function scaffoldFileToOpen(reply: WroteReply): string | undefined {
  return reply.written.find((f) => f.endsWith(".py")) ?? reply.written[0];
}

/** *Show Data Path*: the store's tagged.jsonl and its counts. */
export function dataPathText(reply: DataReply): string {
  const c = reply.counts;
  const counts = `good ${c.good}, bad ${c.bad}, rewritten ${c.rewritten}, traced ${c.traced}, total ${c.total}`;
  const warned = reply.warnings.length ? ` · ${reply.warnings.length} warning${reply.warnings.length > 1 ? "s" : ""}: ${reply.warnings[0] ?? ""}` : "";
  return `Machine data: ${reply.store} (${counts})${warned}`;
}

/** A job command's reply: the job, the user's "no" to a paid or long run, or (with `plan: true`) the plan. */
export function isJob(reply: JobSummary | JobDeclined | JobPlan): reply is JobSummary {
  return reply.status !== "declined" && reply.status !== "plan";
}

/** Jobs of `machine.jobs.list` that can still be cancelled. */
export function cancellableJobs(reply: JobsListReply): { id: string; label: string }[] {
  return reply.jobs.filter((j) => j.status === "running" || j.status === "starting").map((j) => ({ id: j.job_id, label: j.verb }));
}

/**
 * The message of an error reply the server has shown the user already (window/showMessage; `data.shown`): a user
 * error such as a bad line or a wrong file. The extension logs it as one line and shows nothing more.
 */
export function serverShownError(err: unknown): string | undefined {
  if (typeof err !== "object" || err === null) return undefined;
  const { data, message } = err as { data?: unknown; message?: unknown };
  if (typeof data !== "object" || data === null || (data as { shown?: unknown }).shown !== true) return undefined;
  return typeof message === "string" ? message : "";
}

/**
 * A server message as the extension shows it: one "Machine: " label. The server labels what it says for every
 * client ("machine: …", which Neovim and Emacs show as is); that label is replaced, never doubled.
 */
export function labelServerMessage(message: string): string {
  return `Machine: ${message.replace(/^machine:\s*/i, "")}`;
}
