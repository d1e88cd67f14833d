/** Restricted Mode in the command handlers: a command that waits for trust says so (logic/trust.ts decides). */
import * as vscode from "vscode";
import { PALETTE_TITLES } from "./generated/palette";
import { restrictedRefusal } from "./logic/trust";

/** True (after telling the user, with a way to trust the folder) when `command` may not run now. */
export function refusedUntilTrusted(command: string): boolean {
  const refusal = restrictedRefusal(command, vscode.workspace.isTrusted, PALETTE_TITLES[command]); // its palette title
  if (refusal === undefined) return false;
  void vscode.window.showWarningMessage(refusal, "Manage Workspace Trust").then((pick) => {
    if (pick) void vscode.commands.executeCommand("workbench.trust.manage");
  });
  return true;
}
