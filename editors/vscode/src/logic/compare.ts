/**
 * An eval comparison (the reply of `machine.eval.compare`: `{message, comparison}` with the fields of
 * `machine_lsp.core.evals.Comparison`) → the model the webview draws: a summary and the rows whose correctness
 * flipped. Unknown extra fields are shown too. Pure: no `vscode` import.
 */

export interface CompareView {
  title: string;
  summary: { label: string; value: string }[];
  columns: string[];
  rows: { cells: string[]; change: "fixed" | "broken" | "changed" }[];
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

export function cellText(v: unknown, max = 160): string {
  let s: string;
  if (v === null || v === undefined) s = "";
  else if (typeof v === "string") s = v;
  else if (typeof v === "number") s = Number.isInteger(v) ? String(v) : v.toPrecision(4);
  else if (typeof v === "boolean") s = v ? "✓" : "✗";
  else s = JSON.stringify(v);
  s = s.replace(/\s+/g, " ").trim();
  return s.length > max ? s.slice(0, max - 1) + "…" : s;
}

const pct = (v: number): string => `${(v * 100).toFixed(1)}%`;
const pts = (v: number): string => `${v >= 0 ? "+" : "−"}${Math.abs(v * 100).toFixed(1)} pts`;

const ROW_KEYS = ["changed", "changed_rows", "flipped"];
const PREFERRED_COLUMNS = ["id", "prompt", "expected", "a_output", "b_output", "a_correct", "b_correct"];
const LABELS: Record<string, string> = {
  n: "paired rows",
  delta: "Δ accuracy",
  gained: "gained (wrong → right)",
  lost: "lost (right → wrong)",
  both_correct: "both right",
  both_wrong: "both wrong",
  mcnemar_p: "McNemar p (exact)",
  outputs_changed: "outputs changed",
  same_data: "same data",
};

export function compareView(result: unknown): CompareView {
  const r = isObj(result) && isObj(result.comparison) ? result.comparison : result;
  const view: CompareView = { title: "Comparison", summary: [], columns: [], rows: [] };
  if (!isObj(r)) {
    view.summary.push({ label: "result", value: cellText(r, 400) });
    return view;
  }
  const aName = typeof r.a_name === "string" && r.a_name ? r.a_name : "A";
  const bName = typeof r.b_name === "string" && r.b_name ? r.b_name : "B";
  view.title = `${aName} → ${bName}`;
  const done = new Set(["a_name", "b_name", ...ROW_KEYS]);
  const side = (key: string, fmt: (v: number) => string, label: string): void => {
    for (const [k, name] of [[`a_${key}`, aName], [`b_${key}`, bName]] as const) {
      const v = r[k];
      done.add(k);
      if (typeof v === "number") view.summary.push({ label: `${label} ${name}`, value: fmt(v) });
    }
  };
  side("accuracy", pct, "accuracy");
  side("correct", String, "correct");
  side("format_rate", pct, "format rate");
  side("bleed_rate", pct, "style bleed");
  for (const [k, v] of Object.entries(r)) {
    if (done.has(k)) continue;
    const label = LABELS[k] ?? k.replace(/_/g, " ");
    if (k === "delta" && typeof v === "number") view.summary.push({ label, value: pts(v) });
    else if (k === "mcnemar_p" && typeof v === "number") view.summary.push({ label, value: v < 0.001 ? v.toExponential(2) : v.toFixed(3) });
    else if (typeof v === "number" || typeof v === "string" || typeof v === "boolean") view.summary.push({ label, value: cellText(v) });
    else if (Array.isArray(v)) {
      if (v.length) view.summary.push({ label, value: `${v.length}: ${cellText(v.slice(0, 5).map((x) => cellText(x, 40)).join(", "), 120)}` });
    }
  }
  const rowsKey = ROW_KEYS.find((k) => Array.isArray(r[k]));
  const raw = rowsKey ? (r[rowsKey] as unknown[]).filter(isObj) : [];
  if (raw.length) {
    const keys = new Set<string>();
    for (const row of raw) for (const k of Object.keys(row)) keys.add(k);
    const ordered = [...PREFERRED_COLUMNS.filter((k) => keys.has(k)), ...[...keys].filter((k) => !PREFERRED_COLUMNS.includes(k))].slice(0, 8);
    view.columns = ordered.map((k) => (k === "a_output" ? `${aName} output` : k === "b_output" ? `${bName} output` : k === "a_correct" ? `${aName} ✓` : k === "b_correct" ? `${bName} ✓` : k));
    for (const row of raw) {
      const ca = row.a_correct;
      const cb = row.b_correct;
      const change = ca === false && cb === true ? "fixed" : ca === true && cb === false ? "broken" : "changed";
      view.rows.push({ cells: ordered.map((k) => cellText(row[k])), change });
    }
  }
  return view;
}
