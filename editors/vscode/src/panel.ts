/** The "Machine: Run" webview: live loss curves from job events and the accuracy table of a comparison. */
import * as crypto from "node:crypto";
import * as vscode from "vscode";
import type { CompareView } from "./logic/compare";
import { panelSummary, type JobState } from "./logic/jobs";

interface PanelJob {
  id: string;
  job: string;
  status: string;
  step?: number | undefined;
  total?: number | undefined;
  losses: { step: number; loss: number }[];
  evals: { name: string; accuracy: number; correct?: number | undefined; n?: number | undefined }[];
  checkpoints: { name: string; address: string }[];
  message?: string | undefined;
}

function toPanelJob(st: JobState): PanelJob {
  return {
    id: st.id,
    job: st.job,
    status: st.status,
    step: st.step,
    total: st.total,
    losses: st.losses,
    evals: st.evals,
    checkpoints: st.checkpoints.map((c) => ({ name: c.name, address: c.address })),
    message: st.message,
  };
}

export class RunPanel implements vscode.Disposable {
  private panel: vscode.WebviewPanel | undefined;
  private comparison: CompareView | undefined;

  constructor(
    private readonly extensionUri: vscode.Uri,
    private readonly jobs: () => Iterable<JobState>,
  ) {}

  get isOpen(): boolean {
    return this.panel !== undefined;
  }

  show(preserveFocus = false): void {
    if (this.panel) {
      this.panel.reveal(undefined, preserveFocus);
      this.postState();
      return;
    }
    const media = vscode.Uri.joinPath(this.extensionUri, "media");
    const panel = vscode.window.createWebviewPanel(
      "machineLsp.run",
      "Machine: Run",
      { viewColumn: vscode.ViewColumn.Beside, preserveFocus },
      { enableScripts: true, localResourceRoots: [media], retainContextWhenHidden: true },
    );
    this.panel = panel;
    panel.webview.html = this.html(panel.webview, media);
    panel.onDidDispose(() => {
      this.panel = undefined;
    });
    panel.webview.onDidReceiveMessage((msg: unknown) => {
      if (typeof msg === "object" && msg !== null && (msg as { type?: unknown }).type === "ready") this.postState();
    });
  }

  update(): void {
    this.postState();
  }

  showComparison(view: CompareView): void {
    this.comparison = view;
    this.show(true);
    this.postState();
  }

  private postState(): void {
    if (!this.panel) return;
    const states = [...this.jobs()];
    const jobs = states.map(toPanelJob);
    // The summary is the status bar's own words (same job, same status): computed here, not in the webview.
    const summary = panelSummary(new Map(states.map((st) => [st.id, st])));
    void this.panel.webview.postMessage({ type: "state", jobs, summary, comparison: this.comparison ?? null });
  }

  private html(webview: vscode.Webview, media: vscode.Uri): string {
    const nonce = crypto.randomBytes(16).toString("base64");
    const script = webview.asWebviewUri(vscode.Uri.joinPath(media, "panel.js"));
    const style = webview.asWebviewUri(vscode.Uri.joinPath(media, "panel.css"));
    const csp = [
      "default-src 'none'",
      `style-src ${webview.cspSource}`,
      `script-src 'nonce-${nonce}'`,
      `img-src ${webview.cspSource} data:`,
      `font-src ${webview.cspSource}`,
    ].join("; ");
    return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link rel="stylesheet" href="${style.toString()}">
<title>Machine: Run</title>
</head>
<body>
<section id="jobs-section">
  <h2>Training loss</h2>
  <p id="job-summary" class="muted">No job has reported yet. Start one with “Machine: Smoke Run” or “Machine: Train”.</p>
  <canvas id="loss" role="img" aria-label="Training loss by step"></canvas>
  <ul id="legend"></ul>
  <div id="evals"></div>
</section>
<section id="compare-section" hidden>
  <h2 id="compare-title">Comparison</h2>
  <dl id="compare-summary"></dl>
  <div class="table-scroll"><table id="compare-table"><colgroup><col class="change"><col class="id"><col><col><col><col><col class="check"><col class="check"></colgroup><thead></thead><tbody></tbody></table></div>
</section>
<script nonce="${nonce}" src="${script.toString()}"></script>
</body>
</html>`;
  }

  dispose(): void {
    this.panel?.dispose();
  }
}
