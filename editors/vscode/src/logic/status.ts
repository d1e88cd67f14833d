/**
 * The Machine status item (like ruff's): the server's state, the served checkpoint, the running job, Restricted
 * Mode. One view for the status-bar item and the JSON Lines language status item; a click shows the server log.
 * Pure: no `vscode` import.
 */
import { statusText, type JobState } from "./jobs";
import type { ServedState } from "./serving";

export type ServerState = "starting" | "running" | "stopped" | "failed";

export interface StatusInputs {
  server: ServerState;
  /** Why the server is not running (failed), or a training problem of its interpreter. */
  problem?: string | undefined;
  /** The running server's name and version ("machine-lsp 0.1.0"). */
  serverInfo?: string | undefined;
  /** The interpreter that runs it. */
  interpreter?: string | undefined;
  restricted: boolean;
  served: ServedState;
  /** The job the jobs item shows (the latest running one). */
  job?: JobState | undefined;
}

export interface StatusView {
  /** The status-bar text (with codicons). */
  text: string;
  /** One line of detail (the language status item's `detail`). */
  detail: string;
  /** Markdown-free tooltip, one fact a line. */
  tooltip: string;
  severity: "info" | "warning" | "error";
  busy: boolean;
}

const SERVER_WORDS: Record<ServerState, string> = {
  starting: "server starting",
  running: "server running",
  stopped: "server stopped",
  failed: "server not running",
};

export function statusView(s: StatusInputs): StatusView {
  const icon = s.server === "failed" ? "$(error)" : s.server === "starting" ? "$(loading~spin)" : s.server === "stopped" ? "$(circle-slash)" : s.restricted ? "$(shield)" : "$(pass)";
  const served = s.served.status === "stopped" ? "" : s.served.status === "serving" ? `serving ${s.served.checkpoint ?? "a checkpoint"}` : `loading ${s.served.checkpoint ?? "a checkpoint"}…`;
  const job = s.job && s.job.status === "running" && s.job.servingUrl === undefined ? statusText(s.job) : "";
  const parts = [served, job].filter(Boolean);
  const words = s.restricted && s.server === "running" ? "Restricted Mode: diagnostics and hovers only" : SERVER_WORDS[s.server];
  const tooltip = [
    `Machine: ${words}${s.serverInfo ? ` (${s.serverInfo})` : ""}`,
    s.interpreter ? `Python: ${s.interpreter}` : "",
    s.problem ?? "",
    s.served.status === "stopped" ? "Served checkpoint: none" : `Served checkpoint: ${s.served.checkpoint ?? "?"}${s.served.url ? ` at ${s.served.url}` : ""} (${s.served.status})`,
    `Job: ${job || "none running"}`,
    s.restricted ? "Off until you trust the folder: tagging, the Sessions view, training, evaluation, serving." : "",
    "Click: show the server log.",
  ].filter(Boolean);
  return {
    text: [`${icon} Machine`, ...parts].join(" · "),
    detail: parts.length ? parts.join(" · ") : words,
    tooltip: tooltip.join("\n"),
    severity: s.server === "failed" ? "error" : s.restricted || s.server === "stopped" ? "warning" : "info",
    busy: s.server === "starting" || job !== "" || s.served.status === "starting",
  };
}
