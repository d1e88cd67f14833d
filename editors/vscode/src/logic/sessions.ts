/**
 * What the Sessions view and *Tag Last Agent Turn…* show from machine.sessions, machine.sessions.turns and
 * machine.tag {preview: true}. Pure: no `vscode` import (the view and the commands are in src/sessions*.ts).
 */
import type { SessionEntry, SessionTurn, Source, TaggedReply, TagPreview } from "../generated/replies";

export const SESSION_COMMANDS = {
  sessions: "machine.sessions",
  turns: "machine.sessions.turns",
  tag: "machine.tag",
  tagged: "machine.tagged",
} as const;

export type Verdict = "good" | "bad";

/** The Sessions view and the extension commands of this flow (contributed in package.json; a unit test checks). */
export const SESSIONS_VIEW = "machineLsp.sessions";
export const SESSION_UI_COMMANDS = {
  tagLastGood: "machineLsp.tagLastGood",
  tagLastBad: "machineLsp.tagLastBad",
  refresh: "machineLsp.sessions.refresh",
  tagGood: "machineLsp.sessions.tagGood",
  tagBad: "machineLsp.sessions.tagBad",
  openTurn: "machineLsp.sessions.openTurn",
} as const;

/** The `from` of machine.tag that names one turn of one session (turns count from 1). */
export function fromSpec(sessionId: string, turnNumber: number): string {
  return `${sessionId}:${turnNumber}`;
}

export function flat(text: string, width: number): string {
  const one = text.split(/\s+/).filter(Boolean).join(" ");
  return one.length <= width ? one : `${one.slice(0, width - 1)}…`;
}

/** "14:02" today, "11-28 09:15" another day (local time), like `machine sessions`. */
export function when(updatedSeconds: number, now: Date = new Date()): string {
  const d = new Date(updatedSeconds * 1000);
  const two = (n: number): string => String(n).padStart(2, "0");
  const time = `${two(d.getHours())}:${two(d.getMinutes())}`;
  const sameDay = d.getFullYear() === now.getFullYear() && d.getMonth() === now.getMonth() && d.getDate() === now.getDate();
  return sameDay ? time : `${two(d.getMonth() + 1)}-${two(d.getDate())} ${time}`;
}

export interface NodeView {
  label: string;
  description: string;
  tooltip: string;
  /** A codicon id. */
  icon: string;
  /** The tree item's contextValue: decides which inline actions show (package.json `view/item/context`). */
  contextValue: string;
}

export function sessionView(s: SessionEntry, now?: Date): NodeView {
  const turns = s.turns == null ? "? turns" : `${s.turns} turn${s.turns === 1 ? "" : "s"}`;
  return {
    label: s.first_prompt ? flat(s.first_prompt, 60) : s.id,
    description: `${s.harness} · ${turns} · ${when(s.updated, now)}`,
    tooltip: [`${s.harness} session ${s.id}`, s.path, s.problem ? `cannot read: ${s.problem}` : ""].filter(Boolean).join("\n"),
    icon: s.problem ? "warning" : "comment-discussion",
    contextValue: "machineSession",
  };
}

/** The marker of a turn whose prompt makes preference pairs (`⇄ 2 pairs`); empty when it makes none. */
export function pairsMark(t: SessionTurn): string {
  const n = t.pairs;
  return n > 0 ? `⇄ ${n} ${n === 1 ? "pair" : "pairs"}` : "";
}

function pairsNote(t: SessionTurn): string {
  const n = t.pairs;
  return n > 0 ? `makes ${n} preference ${n === 1 ? "pair" : "pairs"} (DPO, SFT then DPO train on them)` : "";
}

/** Where each stored record was tagged from (record id → its source), from machine.tagged. */
export type RecordSources = ReadonlyMap<string, Source>;

export function recordSources(reply: TaggedReply): RecordSources {
  return new Map(reply.records.map((r) => [r.id, r.source]));
}

/**
 * The store matches a tag to a turn by its conversation (the same prompt and answer), not by where it was tagged:
 * a turn shows a tag made on an identical turn of another session or file. Says so, naming where, or "" when
 * every record on the turn was tagged from this log.
 */
export function taggedElsewhere(t: SessionTurn, sources: RecordSources | undefined, basename: (uri: string) => string): string {
  if (!sources || t.verdict == null) return "";
  const here = t.uri.split("#")[0];
  const others = t.records.map((id) => sources.get(id)).filter((s): s is Source => s !== undefined && s.uri.split("#")[0] !== here);
  if (!others.length || others.length < t.records.filter((id) => sources.has(id)).length) return "";
  const where = others.map((s) => `${s.session_id ? `session ${s.session_id} ` : ""}(${basename(s.uri)}${s.line != null ? `:${s.line}` : ""})`);
  return `tagged from ${[...new Set(where)].join(", ")}: the same prompt and answer, so the tag holds here too`;
}

/** What a turn shows: its prompt, the answer, and the standing tag (the last one wins) when it has one. */
export function turnView(t: SessionTurn, sources?: RecordSources, basename: (uri: string) => string = (u) => u.split("/").pop() ?? u): NodeView {
  const tag = t.verdict == null ? "" : t.verdict === "good" ? (t.rewritten ? "good (rewritten)" : "good") : "bad";
  const elsewhere = taggedElsewhere(t, sources, basename);
  const marks = [tag, elsewhere, t.conflict ? `${t.records.length} tags disagree: the last stands` : "", t.blocked ? `cannot be good: ${t.blocked}` : "", pairsNote(t)];
  return {
    label: `${t.number}. ${flat(t.prompt, 50) || "(no prompt)"}`,
    description: [tag ? `✓ ${tag}${elsewhere ? " (same exchange tagged elsewhere)" : ""}` : "", pairsMark(t), flat(t.answer, 60)].filter(Boolean).join(" · "),
    tooltip: [`Prompt: ${t.prompt}`, `Answer: ${t.answer}`, ...marks.filter(Boolean), `lines ${t.line}–${t.end_line}`].join("\n"),
    icon: t.conflict ? "warning" : t.verdict === "good" ? "thumbsup-filled" : t.verdict === "bad" ? "thumbsdown-filled" : "circle-outline",
    contextValue: t.verdict == null ? "machineTurn" : `machineTurn.${t.verdict}`,
  };
}

/** The log line to reveal when a turn is opened (0-based, as VS Code counts); undefined when the session is not a
 * text log (OpenCode keeps its sessions in a SQLite database). */
export function revealTarget(t: SessionTurn): { uri: string; line: number } | undefined {
  if (!t.uri.startsWith("file:") || !/\.jsonl?$/.test(t.uri)) return undefined;
  return { uri: t.uri, line: Math.max(t.end_line - 1, 0) };
}

export interface PreviewText {
  message: string;
  detail: string;
}

/** The confirmation shown before *Tag Last Agent Turn as Good/Bad…* stores anything. */
export function previewText(p: TagPreview, width = 600): PreviewText {
  const session = [p.harness ?? "log", p.session_id ? `session ${p.session_id}` : ""].filter(Boolean).join(" ");
  const verdict = p.verdict === "good" ? "good" : "bad";
  const cut = (text: string): string => (text.length <= width ? text : `${text.slice(0, width - 1)}…`);
  const lines = [
    `From: ${session} (${p.where})`,
    "",
    `Prompt:\n${cut(p.prompt.trim()) || "(none)"}`,
    "",
    `Answer:\n${cut(p.answer.trim()) || "(empty)"}`,
  ];
  if (p.record.messages.length > 2) lines.push("", `${p.record.messages.length} messages will be stored (the conversation up to this answer).`);
  if (p.duplicate_of) lines.push("", `Already tagged ${verdict} (record ${p.duplicate_of}): confirming adds nothing.`);
  return { message: `Tag the last turn of this ${p.harness ?? "agent"} session as ${verdict}?`, detail: lines.join("\n") };
}
