// The tagged-rows table (src/taggedView.ts): draws the rows the extension posts, filters them as you type (the
// same rule as logic/tagged.ts rowMatches, over the row's precomputed haystack), and posts row actions back.
// Text goes in with textContent only: a prompt or a note is data, never markup.
(function () {
  const vscode = acquireVsCodeApi();
  const body = document.querySelector("#tagged tbody");
  const search = document.getElementById("search");
  const count = document.getElementById("count");
  let rows = [];

  const matches = (row, query) =>
    query.toLowerCase().split(/\s+/).filter(Boolean).every((w) => (w === "good" || w === "bad" ? row.verdict === w : row.haystack.includes(w)));

  function cell(tr, text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    tr.appendChild(td);
    return td;
  }

  function button(td, label, type, id, title) {
    const b = document.createElement("button");
    b.textContent = label;
    b.title = title;
    b.dataset.action = type;
    b.addEventListener("click", (e) => {
      e.stopPropagation();
      vscode.postMessage({ type, id });
    });
    td.appendChild(b);
  }

  function draw() {
    const query = search.value;
    const shown = rows.filter((r) => matches(r, query));
    body.replaceChildren();
    for (const r of shown) {
      const tr = document.createElement("tr");
      tr.dataset.id = r.id;
      tr.title = "Click to open the source line";
      cell(tr, r.verdict === "good" ? "👍 good" : "👎 bad", `verdict ${r.verdict}`);
      cell(tr, r.prompt || "(no prompt)");
      cell(tr, (r.answerKind === "rewrite" ? "✎ " : "") + r.answer);
      cell(tr, r.note);
      cell(tr, r.harness);
      cell(tr, r.when);
      cell(tr, r.where);
      cell(tr, r.trainedIn, r.trainedIn === "not yet" ? "muted" : undefined);
      const actions = cell(tr, "", "actions");
      button(actions, "Note…", "note", r.id, "Change the note");
      button(actions, r.verdict === "good" ? "→ bad" : "→ good", "flip", r.id, "Flip the verdict");
      button(actions, "Untag", "untag", r.id, "Take the tag back (the store keeps the history)");
      tr.addEventListener("click", () => vscode.postMessage({ type: "open", id: r.id }));
      body.appendChild(tr);
    }
    count.textContent = `${shown.length} of ${rows.length} rows`;
  }

  search.addEventListener("input", draw);
  window.addEventListener("message", (event) => {
    const msg = event.data;
    if (!msg || msg.type !== "rows") return;
    rows = msg.rows;
    document.getElementById("store").textContent = `${msg.store}${msg.warnings.length ? ` · ${msg.warnings.length} warning(s): ${msg.warnings[0]}` : ""}`;
    draw();
  });
  vscode.postMessage({ type: "ready" });
})();
