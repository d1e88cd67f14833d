/**
 * The Sessions view (the Machine activity-bar container; the store's watcher refreshes it): this project's agent sessions (machine.sessions) → their turns
 * (machine.sessions.turns) with the standing tag shown → inline Good / Bad (machine.tag {from: "ID:N"}).
 * Opening a turn reveals its line in the log. What each node shows is in logic/sessions.ts (unit-tested).
 */
import * as path from "node:path";
import * as vscode from "vscode";
import type { SessionEntry, SessionTurn } from "./generated/replies";
import { fromSpec, recordSources, revealTarget, SESSION_COMMANDS, SESSION_UI_COMMANDS, SESSIONS_VIEW, sessionView, turnView, type NodeView, type RecordSources, type Verdict } from "./logic/sessions";
import type { ServerManager } from "./server";
import { refusedUntilTrusted } from "./trust";
import { callServer, offerNote } from "./sessions";

type Node = { kind: "session"; session: SessionEntry } | { kind: "turn"; session: SessionEntry; turn: SessionTurn } | { kind: "message"; text: string };

export class SessionsView implements vscode.TreeDataProvider<Node>, vscode.Disposable {
  private readonly changed = new vscode.EventEmitter<Node | undefined>();
  readonly onDidChangeTreeData = this.changed.event;
  private readonly disposables: vscode.Disposable[] = [];
  /** Where each stored record was tagged from, read with the session list (see logic/sessions taggedElsewhere). */
  private sources: RecordSources | undefined;

  constructor(private readonly server: ServerManager) {
    // A tag made elsewhere (the CLI, another window, a code action) appends to the store: show it here too.
    const store = vscode.workspace.createFileSystemWatcher("**/.machine/tagged.jsonl");
    const changed = (): void => {
      this.refresh();
    };
    this.disposables.push(
      store,
      store.onDidChange(changed),
      store.onDidCreate(changed),
      store.onDidDelete(changed),
      vscode.window.createTreeView(SESSIONS_VIEW, { treeDataProvider: this, showCollapseAll: true }),
      vscode.commands.registerCommand(SESSION_UI_COMMANDS.refresh, () => {
        this.refresh();
      }),
      vscode.commands.registerCommand(SESSION_UI_COMMANDS.tagGood, (node: Node) => (refusedUntilTrusted(SESSION_UI_COMMANDS.tagGood) ? undefined : this.tag(node, "good"))),
      vscode.commands.registerCommand(SESSION_UI_COMMANDS.tagBad, (node: Node) => (refusedUntilTrusted(SESSION_UI_COMMANDS.tagBad) ? undefined : this.tag(node, "bad"))),
      vscode.workspace.onDidGrantWorkspaceTrust(changed),
      vscode.commands.registerCommand(SESSION_UI_COMMANDS.openTurn, (node: Node) => this.open(node)),
    );
  }

  refresh(): void {
    this.changed.fire(undefined);
  }

  getTreeItem(node: Node): vscode.TreeItem {
    if (node.kind === "message") return new vscode.TreeItem(node.text);
    const view: NodeView = node.kind === "session" ? sessionView(node.session) : turnView(node.turn, this.sources, (uri) => path.basename(vscode.Uri.parse(uri).fsPath));
    const item = new vscode.TreeItem(view.label, node.kind === "session" ? vscode.TreeItemCollapsibleState.Collapsed : vscode.TreeItemCollapsibleState.None);
    item.description = view.description;
    item.tooltip = view.tooltip;
    item.iconPath = new vscode.ThemeIcon(view.icon);
    item.contextValue = view.contextValue;
    if (node.kind === "turn") item.command = { command: SESSION_UI_COMMANDS.openTurn, title: "Open Turn", arguments: [node] };
    return item;
  }

  async getChildren(node?: Node): Promise<Node[]> {
    // Restricted Mode: the view is empty and its welcome content says why (package.json viewsWelcome).
    if (!vscode.workspace.isTrusted) return [];
    try {
      if (!node) {
        const reply = await callServer(this.server, SESSION_COMMANDS.sessions, { limit: 30 });
        this.sources = await callServer(this.server, SESSION_COMMANDS.tagged, {}).then(recordSources, () => undefined);
        if (!reply.sessions.length) return [{ kind: "message", text: `No agent sessions run in ${reply.project}` }];
        return reply.sessions.map((session) => ({ kind: "session", session }));
      }
      if (node.kind !== "session") return [];
      const reply = await callServer(this.server, SESSION_COMMANDS.turns, { session: node.session.id });
      const turns: Node[] = reply.turns.map((turn) => ({ kind: "turn", session: node.session, turn }));
      return turns.length ? turns : [{ kind: "message", text: reply.problems[0] ?? "No assistant turn yet" }];
    } catch (err) {
      const msg = err instanceof Error ? err.message : String(err);
      this.server.output.error(`Sessions: ${msg}`);
      return [{ kind: "message", text: `Cannot list: ${msg}` }];
    }
  }

  private async tag(node: Node, verdict: Verdict): Promise<void> {
    if (node.kind !== "turn") return;
    try {
      const note = await offerNote(verdict, `turn ${node.turn.number}`);
      await callServer(this.server, SESSION_COMMANDS.tag, { from: fromSpec(node.session.id, node.turn.number), verdict, ...(note ? { note } : {}) });
      this.changed.fire({ kind: "session", session: node.session });
      this.refresh();
    } catch (err) {
      void vscode.window.showErrorMessage(`Machine: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  private async open(node: Node): Promise<void> {
    if (node.kind !== "turn") return;
    const target = revealTarget(node.turn);
    if (!target) {
      void vscode.window.showInformationMessage(`Machine: ${node.session.harness} keeps this session in a database (${node.session.path}): no line to show.`);
      return;
    }
    const doc = await vscode.workspace.openTextDocument(vscode.Uri.parse(target.uri));
    const position = new vscode.Position(Math.min(target.line, doc.lineCount - 1), 0);
    await vscode.window.showTextDocument(doc, { selection: new vscode.Range(position, position), preview: true });
  }

  dispose(): void {
    for (const d of this.disposables) d.dispose();
    this.changed.dispose();
  }
}
