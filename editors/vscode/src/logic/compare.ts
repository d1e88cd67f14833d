/**
 * The reply of `machine.eval.compare` (`CompareReply`: `{message, comparison}`, generated from
 * machine_lsp/lsp/replies.py) → the model the webview draws: a summary and the rows whose correctness flipped.
 * Pure: no `vscode` import.
 */
import type { CompareReply, Comparison } from "../generated/replies";

export interface CompareView {
  title: string;
  summary: { label: string; value: string }[];
  columns: string[];
  rows: { cells: string[]; change: "fixed" | "broken" }[];
}

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
const listed = (ids: string[]): string => `${ids.length}: ${cellText(ids.slice(0, 5).map((x) => cellText(x, 40)).join(", "), 120)}`;

export function compareView(reply: CompareReply): CompareView {
  const c: Comparison = reply.comparison;
  const a = c.a_name || "A";
  const b = c.b_name || "B";
  const summary: CompareView["summary"] = [
    { label: `accuracy ${a}`, value: pct(c.a_accuracy) },
    { label: `accuracy ${b}`, value: pct(c.b_accuracy) },
    { label: `correct ${a}`, value: String(c.a_correct) },
    { label: `correct ${b}`, value: String(c.b_correct) },
    { label: `format rate ${a}`, value: pct(c.a_format_rate) },
    { label: `format rate ${b}`, value: pct(c.b_format_rate) },
  ];
  if (c.a_bleed_rate != null) summary.push({ label: `style bleed ${a}`, value: pct(c.a_bleed_rate) });
  if (c.b_bleed_rate != null) summary.push({ label: `style bleed ${b}`, value: pct(c.b_bleed_rate) });
  summary.push(
    { label: "paired rows", value: String(c.n) },
    { label: "Δ accuracy", value: pts(c.delta) },
    { label: "gained (wrong → right)", value: String(c.gained) },
    { label: "lost (right → wrong)", value: String(c.lost) },
    { label: "both right", value: String(c.both_correct) },
    { label: "both wrong", value: String(c.both_wrong) },
    { label: "McNemar p (exact)", value: c.mcnemar_p < 0.001 ? c.mcnemar_p.toExponential(2) : c.mcnemar_p.toFixed(3) },
    { label: "outputs changed", value: String(c.outputs_changed) },
    { label: "same data", value: cellText(c.same_data) },
  );
  if (c.only_in_a.length) summary.push({ label: `only in ${a}`, value: listed(c.only_in_a) });
  if (c.only_in_b.length) summary.push({ label: `only in ${b}`, value: listed(c.only_in_b) });
  return {
    title: `${a} → ${b}`,
    summary,
    columns: ["id", "prompt", "expected", `${a} output`, `${b} output`, `${a} ✓`, `${b} ✓`],
    rows: c.changed.map((row) => ({
      cells: [row.id, row.prompt, row.expected, row.a_output, row.b_output, row.a_correct, row.b_correct].map((v) => cellText(v)),
      change: !row.a_correct && row.b_correct ? "fixed" : "broken",
    })),
  };
}
