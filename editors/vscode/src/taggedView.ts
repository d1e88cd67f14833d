/**
 * *Machine: Show Tagged Rows*: the store as a table (prompt, answer or rewrite, verdict, note, harness, when, the
 * runs that trained on it) with a
 * search box; a row opens its source line, and its buttons untag it, change its note or flip its verdict
 * (machine.untag / machine.retag: the store keeps the history). Rows and actions: logic/tagged.ts.
 */
import * as crypto from "node:crypto";
import * as path from "node:path";
import * as vscode from "vscode";
import { ExecuteCommandRequest } from "vscode-languageclient/node";
import type { MachineCommandReplies } from "./generated/replies";
import { parseRowAction, retagArgs, taggedRows, type RowAction, type TaggedRow } from "./logic/tagged";
import type { ServerManager } from "./server";

type EditCommand = "machine.tagged" | "machine.untag" | "machine.retag";

export class TaggedView implements vscode.Disposable {
  private panel: vscode.WebviewPanel | undefined;
  private rows: TaggedRow[] = [];
  private readonly watcher: vscode.FileSystemWatcher;

  constructor(
    private readonly extensionUri: vscode.Uri,
    private readonly server: ServerManager,
  ) {
    // A tag made anywhere (light bulb, CLI, Sessions view) shows in an open table.
    this.watcher = vscode.workspace.createFileSystemWatcher("**/.machine/tagged.jsonl");
    const changed = (): void => {
      if (this.panel) void this.reload();
    };
    this.watcher.onDidChange(changed);
    this.watcher.onDidCreate(changed);
  }

  private async call<C extends EditCommand>(command: C, arg: Record<string, unknown>): Promise<MachineCommandReplies[C]> {
    const client = await this.server.ensureClient();
    if (!client) throw new Error("the machine-lsp server is not running (see “Machine: Show Server Log”).");
    return (await client.sendRequest(ExecuteCommandRequest.type, { command, arguments: [arg] })) as MachineCommandReplies[C];
  }

  async show(): Promise<void> {
    if (!this.panel) {
      const media = vscode.Uri.joinPath(this.extensionUri, "media");
      const panel = vscode.window.createWebviewPanel("machineLsp.tagged", "Machine: Tagged Rows", vscode.ViewColumn.Active, { enableScripts: true, localResourceRoots: [media], retainContextWhenHidden: true });
      this.panel = panel;
      panel.webview.html = this.html(panel.webview, media);
      panel.onDidDispose(() => {
        this.panel = undefined;
      });
      panel.webview.onDidReceiveMessage((msg: unknown) => {
        if (typeof msg === "object" && msg !== null && (msg as { type?: unknown }).type === "ready") void this.reload();
        const action = parseRowAction(msg);
        if (action) void this.act(action).catch((err: unknown) => vscode.window.showErrorMessage(`Machine: ${err instanceof Error ? err.message : String(err)}`));
      });
    } else this.panel.reveal();
    await this.reload();
  }

  private async reload(): Promise<void> {
    const reply = await this.call("machine.tagged", {});
    this.rows = taggedRows(reply, (uri) => path.basename(vscode.Uri.parse(uri).fsPath));
    void this.panel?.webview.postMessage({ type: "rows", rows: this.rows, store: reply.store, warnings: reply.warnings });
  }

  private async act(action: RowAction): Promise<void> {
    const row = this.rows.find((r) => r.id === action.id);
    if (!row) return;
    if (action.type === "open") {
      const doc = await vscode.workspace.openTextDocument(vscode.Uri.parse(row.uri));
      const line = Math.max(0, Math.min((row.line ?? 1) - 1, doc.lineCount - 1));
      await vscode.window.showTextDocument(doc, { selection: new vscode.Range(line, 0, line, 0), viewColumn: vscode.ViewColumn.Beside });
      return;
    }
    if (action.type === "untag") {
      const sure = await vscode.window.showWarningMessage(`Machine: untag this ${row.verdict} row?`, { modal: true, detail: `${row.where}\nPrompt: ${row.prompt}\nAnswer: ${row.answer}\n\nThe store keeps the history; the row no longer trains.` }, "Untag");
      if (sure !== "Untag") return;
      await this.call("machine.untag", { id: row.id });
    } else if (action.type === "note") {
      const note = await vscode.window.showInputBox({ title: `Machine: note for ${row.where}`, value: row.note, prompt: "The tag's note (the store keeps the old one as history)", ignoreFocusOut: true });
      if (note === undefined || note === row.note) return;
      await this.call("machine.retag", retagArgs(row, { note }));
    } else {
      await this.call("machine.retag", retagArgs(row, { flip: true }));
    }
    await this.reload();
  }

  private html(webview: vscode.Webview, media: vscode.Uri): string {
    const nonce = crypto.randomBytes(16).toString("base64");
    const script = webview.asWebviewUri(vscode.Uri.joinPath(media, "tagged.js"));
    const style = webview.asWebviewUri(vscode.Uri.joinPath(media, "panel.css"));
    const csp = ["default-src 'none'", `style-src ${webview.cspSource}`, `script-src 'nonce-${nonce}'`, `font-src ${webview.cspSource}`].join("; ");
    return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link rel="stylesheet" href="${style.toString()}">
<title>Machine: Tagged Rows</title>
</head>
<body>
<h2>Tagged rows</h2>
<p><input id="search" type="search" placeholder="Search: words in any column; good or bad for the verdict" aria-label="Search tagged rows" size="60"> <span id="count" class="muted"></span></p>
<p id="store" class="muted"></p>
<div class="table-scroll"><table id="tagged"><thead><tr><th>Verdict</th><th>Prompt</th><th>Answer or rewrite</th><th>Note</th><th>Harness</th><th>When</th><th>Source</th><th>Trained in</th><th></th></tr></thead><tbody></tbody></table></div>
<script nonce="${nonce}" src="${script.toString()}"></script>
</body>
</html>`;
  }

  dispose(): void {
    this.watcher.dispose();
    this.panel?.dispose();
  }
}
