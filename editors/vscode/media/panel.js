// Webview script of "Machine: Run". No remote resources; colors come from the VS Code theme's CSS variables.
(function () {
  "use strict";
  const vscode = acquireVsCodeApi();
  const canvas = document.getElementById("loss");
  const legend = document.getElementById("legend");
  const summary = document.getElementById("job-summary");
  const evals = document.getElementById("evals");
  let state = vscode.getState() || { jobs: [], summary: "", comparison: null };

  const PALETTE = ["--vscode-charts-blue", "--vscode-charts-orange", "--vscode-charts-green", "--vscode-charts-purple", "--vscode-charts-red", "--vscode-charts-yellow"];
  function cssVar(name, fallback) {
    const v = getComputedStyle(document.body).getPropertyValue(name).trim();
    return v || fallback;
  }
  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  }

  function drawLoss() {
    const jobs = state.jobs.filter((j) => j.losses && j.losses.length);
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth, h = canvas.clientHeight;
    canvas.width = Math.max(1, Math.floor(w * dpr));
    canvas.height = Math.max(1, Math.floor(h * dpr));
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    const fg = cssVar("--vscode-foreground", "#ccc");
    const muted = cssVar("--vscode-descriptionForeground", "#999");
    const grid = cssVar("--vscode-editorWidget-border", "rgba(128,128,128,0.3)");
    ctx.font = `11px ${cssVar("--vscode-font-family", "sans-serif")}`;
    legend.replaceChildren();
    if (!jobs.length) {
      ctx.fillStyle = muted;
      ctx.fillText("Waiting for step events…", 12, 20);
      return;
    }
    let maxStep = 1, minLoss = Infinity, maxLoss = -Infinity;
    for (const j of jobs) for (const p of j.losses) {
      maxStep = Math.max(maxStep, p.step, j.total || 0);
      minLoss = Math.min(minLoss, p.loss);
      maxLoss = Math.max(maxLoss, p.loss);
    }
    if (minLoss === maxLoss) { minLoss -= 0.5; maxLoss += 0.5; }
    const pad = { l: 48, r: 12, t: 10, b: 24 };
    const x = (s) => pad.l + (s / maxStep) * (w - pad.l - pad.r);
    const y = (l) => pad.t + (1 - (l - minLoss) / (maxLoss - minLoss)) * (h - pad.t - pad.b);
    ctx.strokeStyle = grid;
    ctx.fillStyle = muted;
    ctx.lineWidth = 1;
    for (let i = 0; i <= 4; i++) {
      const lv = minLoss + ((maxLoss - minLoss) * i) / 4;
      const yy = y(lv);
      ctx.beginPath(); ctx.moveTo(pad.l, yy); ctx.lineTo(w - pad.r, yy); ctx.stroke();
      ctx.fillText(lv.toPrecision(3), 4, yy + 4);
    }
    ctx.textAlign = "center";
    ctx.fillText("step", (pad.l + w - pad.r) / 2, h - 6);
    ctx.textAlign = "left";
    ctx.fillText("0", pad.l, h - 6);
    ctx.textAlign = "right";
    ctx.fillText(String(maxStep), w - pad.r, h - 6);
    ctx.textAlign = "left";
    jobs.forEach((j, i) => {
      const color = cssVar(PALETTE[i % PALETTE.length], fg);
      ctx.strokeStyle = color;
      ctx.lineWidth = 2;
      ctx.beginPath();
      j.losses.forEach((p, k) => (k ? ctx.lineTo(x(p.step), y(p.loss)) : ctx.moveTo(x(p.step), y(p.loss))));
      ctx.stroke();
      ctx.fillStyle = color;
      for (const p of j.losses) {
        ctx.beginPath();
        ctx.arc(x(p.step), y(p.loss), 3, 0, 2 * Math.PI);
        ctx.fill();
      }
      const last = j.losses[j.losses.length - 1];
      const li = el("li", `${j.job} (${j.id}) · step ${last.step}${j.total ? "/" + j.total : ""} · loss ${last.loss.toPrecision(3)} · ${j.status}`);
      li.style.setProperty("--swatch", color);
      legend.appendChild(li);
    });
  }

  function renderEvals() {
    evals.replaceChildren();
    const rows = [];
    for (const j of state.jobs) for (const e of j.evals || []) rows.push([j.job, e.name, (e.accuracy * 100).toFixed(1) + "%", e.n !== undefined ? `${e.correct}/${e.n}` : ""]);
    if (!rows.length) return;
    evals.appendChild(el("h2", "Evaluations"));
    const t = el("table");
    const hr = el("tr");
    for (const c of ["job", "eval", "accuracy", "correct"]) hr.appendChild(el("th", c));
    t.appendChild(hr);
    for (const r of rows) {
      const tr = el("tr");
      for (const c of r) tr.appendChild(el("td", c));
      t.appendChild(tr);
    }
    evals.appendChild(t);
  }

  function renderCompare() {
    const section = document.getElementById("compare-section");
    const c = state.comparison;
    section.hidden = !c;
    if (!c) return;
    document.getElementById("compare-title").textContent = "Comparison: " + c.title;
    const dl = document.getElementById("compare-summary");
    dl.replaceChildren();
    for (const s of c.summary) { dl.appendChild(el("dt", s.label)); dl.appendChild(el("dd", s.value)); }
    const table = document.getElementById("compare-table");
    const thead = table.querySelector("thead"), tbody = table.querySelector("tbody");
    thead.replaceChildren(); tbody.replaceChildren();
    if (!c.rows.length) { tbody.appendChild(el("tr")).appendChild(el("td", "No rows changed.", "muted")); return; }
    const hr = el("tr");
    hr.appendChild(el("th", "change"));
    for (const col of c.columns) hr.appendChild(el("th", col));
    thead.appendChild(hr);
    for (const r of c.rows) {
      const tr = el("tr", undefined, r.change);
      tr.appendChild(el("td", r.change));
      for (const cell of r.cells) tr.appendChild(el("td", cell));
      tbody.appendChild(tr);
    }
  }

  function render() {
    // The extension sends the status bar's own summary (same job, same status): never recomputed here.
    summary.textContent = state.jobs.length && state.summary
      ? state.summary
      : "No job has reported yet. Start one with “Machine: Smoke Run” or “Machine: Train”.";
    drawLoss();
    renderEvals();
    renderCompare();
  }

  window.addEventListener("message", (e) => {
    const msg = e.data;
    if (msg && msg.type === "state") {
      state = { jobs: msg.jobs || [], summary: msg.summary || "", comparison: msg.comparison || null };
      vscode.setState(state);
      render();
    }
  });
  new ResizeObserver(() => requestAnimationFrame(drawLoss)).observe(canvas);
  // Theme changes swap the CSS variables on <body>: redraw the canvas.
  new MutationObserver(() => render()).observe(document.body, { attributes: true, attributeFilter: ["class", "style"] });
  render();
  vscode.postMessage({ type: "ready" });
})();
