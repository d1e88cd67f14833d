/** Restricted Mode in the command handlers: a command that waits for trust says so (logic/trust.ts decides). */
import * as vscode from "vscode";
import { restrictedRefusal } from "./logic/trust";

/** True (after telling the user, with a way to trust the folder) when `command` may not run now. */
export function refusedUntilTrusted(command: string): boolean {
  const refusal = restrictedRefusal(command, vscode.workspace.isTrusted, commandTitle(command));
  if (refusal === undefined) return false;
  void vscode.window.showWarningMessage(refusal, "Manage Workspace Trust").then((pick) => {
    if (pick) void vscode.commands.executeCommand("workbench.trust.manage");
  });
  return true;
}

/** The palette title of one of our commands ("Smoke Run"), from package.json. */
function commandTitle(command: string): string | undefined {
  const pkg = vscode.extensions.getExtension("machine-lsp.machine-lsp")?.packageJSON as { contributes?: { commands?: { command: string; title: string }[] } } | undefined;
  return pkg?.contributes?.commands?.find((c) => c.command === command)?.title;
}
