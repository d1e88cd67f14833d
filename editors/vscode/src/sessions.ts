/**
 * *Machine: Tag Last Agent Turn as Good…* / *…as Bad…*: machine.tag {from: "last", preview: true} shows what would
 * be stored; Confirm offers a note (skippable) and stores it (machine.tag {from: "last", note?}). Also the typed call the Sessions view uses.
 */
import * as vscode from "vscode";
import { ExecuteCommandRequest } from "vscode-languageclient/node";
import type { MachineCommandReplies, TagPreview, TagReply } from "./generated/replies";
import { noteBox } from "./logic/args";
import { previewText, SESSION_COMMANDS, SESSION_UI_COMMANDS, type Verdict } from "./logic/sessions";
import type { ServerManager } from "./server";
import { refusedUntilTrusted } from "./trust";

export type SessionCommand = (typeof SESSION_COMMANDS)[keyof typeof SESSION_COMMANDS];

/** workspace/executeCommand with one object argument, typed by the reply the server's struct declares. */
export async function callServer<C extends SessionCommand>(server: ServerManager, command: C, arg: Record<string, unknown>): Promise<MachineCommandReplies[C]> {
  const client = await server.ensureClient();
  if (!client) throw new Error("the machine-lsp server is not running (see “Machine: Show Server Log”).");
  return (await client.sendRequest(ExecuteCommandRequest.type, { command, arguments: [arg] })) as MachineCommandReplies[C];
}

/** The note every tag action offers: undefined when the user skipped it (Enter on an empty box, or Escape). */
export async function offerNote(verdict: Verdict, what: string): Promise<string | undefined> {
  const note = await vscode.window.showInputBox({ ...noteBox(verdict, what), ignoreFocusOut: true });
  return note?.trim() ? note.trim() : undefined;
}

const isPreview = (reply: TagPreview | TagReply): reply is TagPreview => "preview" in reply;

/** Preview, ask, tag. Returns the stored reply, or undefined when the user cancelled. */
export async function tagLastTurn(server: ServerManager, verdict: Verdict, from = "last"): Promise<TagReply | undefined> {
  const preview = await callServer(server, SESSION_COMMANDS.tag, { from, verdict, preview: true });
  if (!isPreview(preview)) throw new Error("the server stored the tag instead of previewing it (is it older than the extension?)");
  const text = previewText(preview);
  const confirm = "Confirm";
  const answer = await vscode.window.showInformationMessage(text.message, { modal: true, detail: text.detail }, confirm);
  if (answer !== confirm) return undefined;
  const note = await offerNote(verdict, "the last agent turn");
  const stored = await callServer(server, SESSION_COMMANDS.tag, { from, verdict, ...(note ? { note } : {}) });
  return isPreview(stored) ? undefined : stored;
}

/** The palette commands; `onTagged` refreshes the Sessions view. */
export function registerTagLastCommands(server: ServerManager, onTagged: () => void): vscode.Disposable[] {
  const command = (id: string, verdict: Verdict): vscode.Disposable =>
    vscode.commands.registerCommand(id, async () => {
      if (refusedUntilTrusted(id)) return;
      try {
        if (await tagLastTurn(server, verdict)) onTagged();
      } catch (err) {
        const msg = err instanceof Error ? err.message : String(err);
        server.output.error(`${id}: ${msg}`);
        void vscode.window.showErrorMessage(`Machine: ${msg}`);
      }
    });
  return [command(SESSION_UI_COMMANDS.tagLastGood, "good"), command(SESSION_UI_COMMANDS.tagLastBad, "bad")];
}
