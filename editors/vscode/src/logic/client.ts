/** Which folder a window's server serves. Pure: no `vscode` import. */

export interface FolderScope {
  /** The folder the server serves (its root), when the window has one. */
  folder: string | undefined;
  /** Said once to the user when the window has several folders. */
  notice: string | undefined;
}

/**
 * One server per window, rooted at the first folder: the store (`.machine/`), `machine.toml` and the run
 * directories are per project. Files in other folders are still checked, but their tags and runs belong to the
 * first folder's project: the user is told so once.
 */
export function folderScope(folders: readonly { name: string; fsPath: string }[]): FolderScope {
  const first = folders[0];
  if (!first) return { folder: undefined, notice: undefined };
  if (folders.length === 1) return { folder: first.fsPath, notice: undefined };
  const others = folders.slice(1).map((f) => f.name).join(", ");
  return {
    folder: first.fsPath,
    notice: `Machine serves one project per window: the store, machine.toml and runs are those of “${first.name}”, and tags made in ${others} go there too. Open each project in its own window to keep them apart.`,
  };
}

export type LogLevel = "error" | "warn" | "info" | "debug";

/**
 * The level of one line the server (or a library in it) writes to stderr. The language client would log every
 * such line as an error; the server's own lines say their level ("machine-lsp WARNING …", see lsp/server.py),
 * Python warnings name their category ("…: FutureWarning: …"), and a traceback is an error.
 */
export function stderrLevel(line: string): LogLevel {
  const own = /^machine-lsp (DEBUG|INFO|WARNING|ERROR|CRITICAL)\b/.exec(line)?.[1];
  if (own) return own === "DEBUG" ? "debug" : own === "INFO" ? "info" : own === "WARNING" ? "warn" : "error";
  if (/\b\w*Warning\b[:(]|^\s*warnings\.warn|^WARNING\b/.test(line)) return "warn";
  if (/^Traceback \(most recent call last\)|^\w*(Error|Exception)\b|^(ERROR|CRITICAL|FATAL)\b/.test(line)) return "error";
  return "info";
}

export interface Confirmation {
  message: string;
  detail: string;
  /** Action titles in the server's order; `close` is the one that Escape and the dialog's own Cancel mean. */
  actions: { title: string; close: boolean }[];
}

const CLOSING = /^(cancel|no|don't|do not|skip|not now)$/i;

/**
 * A server question (window/showMessageRequest, e.g. "machine: start the training run? 6 steps on …") as a modal
 * dialog: the question as its message, the rest (the plan) as its detail, so it neither hides after a few seconds
 * nor loses the answer.
 */
export function confirmationView(message: string, actions: readonly { title: string }[]): Confirmation {
  const text = message.replace(/^machine:\s*/i, "").trim();
  const cut = text.indexOf("? ");
  const question = cut >= 0 ? text.slice(0, cut + 1) : text;
  const detail = cut >= 0 ? text.slice(cut + 2).trim() : "";
  return {
    message: `Machine: ${question.charAt(0).toUpperCase()}${question.slice(1)}`,
    detail,
    actions: actions.map((a) => ({ title: a.title, close: CLOSING.test(a.title.trim()) })),
  };
}
