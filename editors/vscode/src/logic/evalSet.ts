/**
 * *Machine: Make Eval Set…* (src/evalSet.ts): held-out tagged rows into the eval file (machine.eval.split), and the
 * server messages that offer it (logic/messageActions.ts). Pure: no `vscode` import.
 */
import * as path from "node:path";

export const MAKE_EVAL_SET_COMMAND = "machineLsp.makeEvalSet";
export const MAKE_EVAL_SET_TITLE = "Make Eval Set…";

/** machine.eval.split's argument: the eval file the settings name (workspace-relative as typed), else the server's
 * choice (machine.toml's [eval] data, else eval.jsonl); `force` replaces an existing file. */
export function evalSetArgs(evalPath: string, workspaceFolder: string | undefined, force = false): Record<string, unknown> {
  const out: Record<string, unknown> = { quiet: true }; // the extension words a refusal itself (it asks to replace)
  const file = evalPath.trim();
  if (file) out.out = workspaceFolder && path.isAbsolute(file) && !path.relative(workspaceFolder, file).startsWith("..") ? path.relative(workspaceFolder, file) : file;
  if (force) out.force = true;
  return out;
}

/** The file named by the server's "already exists" refusal, when that is why nothing was written. */
export function existingEvalFile(message: string): string | undefined {
  return /(?:^|: )(\S+) already exists; --force/.exec(message)?.[1];
}
