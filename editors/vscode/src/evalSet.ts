/**
 * *Machine: Make Eval Set…*: machine.eval.split holds out tagged rows into the eval file (the server says what it
 * wrote); an existing file is replaced only after a modal question. Then the file opens. Rules: logic/evalSet.ts.
 */
import * as vscode from "vscode";
import { ExecuteCommandRequest } from "vscode-languageclient/node";
import type { MachineCommandReplies } from "./generated/replies";
import { evalSetArgs, existingEvalFile } from "./logic/evalSet";
import { currentSettings, workspaceFolderPath, type ServerManager } from "./server";

export async function makeEvalSet(server: ServerManager): Promise<void> {
  const client = await server.ensureClient();
  if (!client) throw new Error("the machine-lsp server is not running (see “Machine: Show Server Log”).");
  const split = async (force: boolean): Promise<MachineCommandReplies["machine.eval.split"]> =>
    (await client.sendRequest(ExecuteCommandRequest.type, { command: "machine.eval.split", arguments: [evalSetArgs(currentSettings().evalPath, workspaceFolderPath(), force)] })) as MachineCommandReplies["machine.eval.split"];
  let reply;
  try {
    reply = await split(false);
  } catch (err) {
    const existing = existingEvalFile(err instanceof Error ? err.message : String(err));
    if (existing === undefined) throw err;
    const pick = await vscode.window.showWarningMessage(`Replace ${existing} with a new split of the tagged rows?`, { modal: true, detail: "The rows held out go into the eval file; runs on the store leave them out." }, "Replace");
    if (pick !== "Replace") return;
    reply = await split(true);
  }
  await vscode.window.showTextDocument(vscode.Uri.file(reply.path), { preview: false });
}
