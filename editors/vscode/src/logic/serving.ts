/**
 * The two servers' faces in VS Code: serving a checkpoint to agents (machine.serve.*, machine.use) and the local
 * Tinker server (machine.tinker.*). What to offer, what to send, what the status-bar items say. Pure: no `vscode`.
 */
import type { ServeReply, TinkerServerReply, UseReply } from "../generated/replies";
import type { CheckpointChoice } from "./args";
import type { JobEvent } from "./jobs";

export const AGENTS = ["pi", "codex", "claude", "opencode"] as const;
export type Agent = (typeof AGENTS)[number];

/** The serve job's verb (machine/jobEvent `start.job`). */
export const SERVE_JOB = "serve";

export interface ServeChoice {
  label: string;
  description: string;
  detail?: string;
  checkpoint: string;
}

/**
 * *Serve Checkpoint…* / *Use Checkpoint in Agent…*: latest, base, then each run's checkpoints (newest first).
 * `tinker://` checkpoints are served by Tinker itself: offered only where an agent is pointed at one (`use`).
 */
export function checkpointChoices(runs: CheckpointChoice[], purpose: "serve" | "use"): ServeChoice[] {
  const out: ServeChoice[] = [
    { label: "$(history) latest", description: "the newest training run's last checkpoint", checkpoint: "latest" },
    { label: "$(circle-outline) base", description: "the base model, untrained", checkpoint: "base" },
  ];
  for (const c of runs) {
    if (purpose === "serve" && !c.address.startsWith("local://")) continue;
    out.push({ label: c.label, description: c.description, detail: c.address, checkpoint: c.address });
  }
  return out;
}

/** machine.serve.start's argument; port 0 asks for any free port (the reply says which). */
export function serveArgs(checkpoint: string, port: number): Record<string, unknown> {
  if (!checkpoint.trim()) throw new Error("Pick a checkpoint to serve.");
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`machine.serve.port must be 0-65535, not ${port}`);
  return { checkpoint: checkpoint.trim(), port };
}

export function useArgs(checkpoint: string, agent: string, write: boolean): Record<string, unknown> {
  if (!(AGENTS as readonly string[]).includes(agent)) throw new Error(`Unknown agent ${agent}: one of ${AGENTS.join(", ")}`);
  return { checkpoint, agent, write };
}

/** What the served-checkpoint status-bar item shows. */
export interface ServedState {
  status: "starting" | "serving" | "stopped";
  checkpoint?: string | undefined;
  url?: string | undefined;
  jobId?: string | undefined;
  message?: string | undefined;
}

export function servedFromReply(r: ServeReply): ServedState {
  return { status: r.status, checkpoint: r.checkpoint ?? undefined, url: r.url ?? undefined, jobId: r.job_id ?? undefined, message: r.message };
}

/**
 * Follows the serve job through machine/jobEvent: `start` (job "serve") → starting, `ready` → serving at its
 * URL, `end` (stopped, or the server died) → stopped. Events of other jobs change nothing.
 */
export function applyServeEvent(st: ServedState, ev: JobEvent): ServedState {
  const id = ev.job_id;
  if (ev.event === "start" && ev.job === SERVE_JOB) return { status: "starting", jobId: id, checkpoint: st.checkpoint, message: "loading…" };
  if (id === undefined || id !== st.jobId) return st;
  if (ev.event === "ready" && typeof ev.url === "string") {
    return { ...st, status: "serving", url: ev.url, checkpoint: typeof ev.name === "string" && ev.name ? ev.name : st.checkpoint, message: typeof ev.message === "string" ? ev.message : st.message };
  }
  if (ev.event === "end") return { status: "stopped", checkpoint: st.checkpoint, jobId: id, message: typeof ev.message === "string" ? ev.message : "stopped" };
  return st;
}

/** The OpenAI-compatible base agents use (`…/v1`). */
export function openaiBase(url: string): string {
  return `${url.replace(/\/+$/, "")}/v1`;
}

export interface StatusItem {
  visible: boolean;
  text: string;
  tooltip: string;
}

export function servedStatus(st: ServedState): StatusItem {
  if (st.status === "stopped") return { visible: false, text: "", tooltip: "" };
  const what = st.checkpoint ?? "checkpoint";
  if (st.status === "starting" || !st.url) return { visible: true, text: `$(loading~spin) Serving ${what}…`, tooltip: `Machine: loading ${what}` };
  const hostPort = st.url.replace(/^https?:\/\//, "");
  return {
    visible: true,
    text: `$(broadcast) ${what} · ${hostPort}`,
    tooltip: `Machine serves ${what} at ${openaiBase(st.url)} (model "machine"; OpenAI and Anthropic APIs)\nClick: copy URL, use in an agent, stop.`,
  };
}

export type ServedAction = "copy" | "use" | "stop";

export function servedMenu(st: ServedState): { label: string; description?: string; action: ServedAction }[] {
  if (st.status === "stopped") return [];
  const items: { label: string; description?: string; action: ServedAction }[] = [];
  if (st.url) items.push({ label: "$(copy) Copy URL", description: openaiBase(st.url), action: "copy" });
  items.push({ label: "$(hubot) Use in Agent…", description: "point pi, codex, claude or opencode at it", action: "use" });
  items.push({ label: "$(debug-stop) Stop Serving", description: st.checkpoint ?? "", action: "stop" });
  return items;
}

/** *Use Checkpoint in Agent…*: the text shown before writing (the modal's detail). */
export function useDetail(r: UseReply): string {
  const lines = [`${r.path}:`, "", r.text.trimEnd()];
  for (const w of r.warnings) lines.push("", `⚠ ${w}`);
  for (const n of r.notes) lines.push("", n);
  return lines.join("\n");
}

export function tinkerStatus(r: TinkerServerReply | undefined): StatusItem {
  if (!r || r.status === "stopped") return { visible: false, text: "", tooltip: "" };
  const where = r.base_url ? r.base_url.replace(/^https?:\/\//, "") : "";
  if (r.status === "starting") return { visible: true, text: `$(loading~spin) Tinker: starting${where ? ` · ${where}` : ""}`, tooltip: `Machine: the local Tinker server is starting\n${r.message}` };
  const answering = r.answering === false ? " (not answering yet)" : "";
  return {
    visible: true,
    text: `$(server-process) Tinker · ${where}${answering}`,
    tooltip: `Local Tinker server (SkyRL tx) at ${r.base_url ?? "?"}${r.pid != null ? `, pid ${r.pid}` : ""}${answering}\nTINKER_BASE_URL=${r.base_url ?? ""}\nClick: copy the URL or stop it.`,
  };
}

/** machine.tinker.serve's argument: only what the user gave (the server's defaults: SmolLM2, port 8000). */
export function tinkerServeArgs(model: string | undefined, port: number | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (model?.trim()) out.model = model.trim();
  if (port !== undefined && port > 0) out.port = port;
  return out;
}
