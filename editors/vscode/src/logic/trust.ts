/**
 * Restricted Mode (an untrusted folder): what still runs and what waits for trust. Declared in package.json
 * (`capabilities.untrustedWorkspaces: limited`, its restrictedConfigurations) and enforced by the extension:
 * the bundled server runs, with an interpreter from the user's settings only and outside the folder (so no module
 * of the folder shadows its own), for the diagnostics of open files and hovers. Pure: no `vscode` import.
 */

import { UNTRUSTED_COMMANDS } from "../generated/palette";

/** The extension commands that run in Restricted Mode (the verb registry's `untrusted` palette entries): they start
 * no job and write nothing in the folder. */
export const RESTRICTED_COMMANDS: ReadonlySet<string> = UNTRUSTED_COMMANDS;

export const RESTRICTED_NOTICE =
  "Machine runs in Restricted Mode: diagnostics of open JSONL files and hovers only. Tagging (it writes .machine/), the Sessions view, training, evaluation, serving and interpreters chosen by this folder are off until you trust it.";

/** The message for a command that waits for trust, or undefined when it may run. */
export function restrictedRefusal(command: string, trusted: boolean, title?: string): string | undefined {
  if (trusted || RESTRICTED_COMMANDS.has(command)) return undefined;
  return `Machine: ${title ?? command} is off in Restricted Mode (it runs jobs or writes to this folder). Trust the folder to use it.`;
}

/**
 * In Restricted Mode a server code action keeps its edit (a quick fix of the open file) and loses its command
 * (`machine.tag` writes the store; a job command starts a process in the folder).
 */
export function restrictedCodeAction<T extends { command?: unknown; edit?: unknown }>(action: T): T | undefined {
  if (action.command === undefined) return action; // a quick fix (its edit comes now or on resolve)
  if (action.edit === undefined) return undefined; // a command and nothing else: it waits for trust
  delete action.command; // the same object (a vscode.CodeAction stays one), without the command
  return action;
}
