/**
 * *Show Tagged Rows* as a table (src/taggedView.ts, media/tagged.js): one row per standing record with its prompt,
 * its answer (or rewrite), verdict, note, harness, when, where and the runs that trained on it; what the search box matches; what the row
 * actions send (machine.untag, machine.retag). Pure: no `vscode` import.
 */
import type { TaggedReply } from "../generated/replies";

export interface TaggedRow {
  id: string;
  verdict: "good" | "bad";
  prompt: string;
  answer: string;
  /** "rewrite" when the answer is the user's rewrite (the original is kept in the store). */
  answerKind: "answer" | "rewrite";
  note: string;
  harness: string;
  /** "2026-12-01 10:00" (UTC, from created_at). */
  when: string;
  /** "chats.jsonl:3" */
  where: string;
  uri: string;
  /** The finished training runs whose data held the row ("run-a, run-b"); "not yet" for an untrained good row,
   * "" for a bad one (bad rows never become training rows of their own). */
  trainedIn: string;
  /** 1-based line of the source, when it has one. */
  line: number | null;
  /** Lower-case text the search box matches (every shown column). */
  haystack: string;
}

const oneLine = (text: string): string => text.replace(/\s+/g, " ").trim();

export function taggedRows(reply: TaggedReply, basename: (uri: string) => string): TaggedRow[] {
  return reply.records.map((r) => {
    const line = r.source.line ?? null;
    const where = `${basename(r.source.uri)}${line != null ? `:${line}` : ""}`;
    const harness = r.source.harness ?? (r.source.kind === "chat_jsonl" ? "jsonl" : r.source.kind.replace("_", " "));
    const when = r.created_at.replace("T", " ").slice(0, 16);
    const row = {
      id: r.id,
      verdict: r.verdict,
      prompt: oneLine(r.prompt),
      answer: oneLine(r.answer),
      answerKind: r.rewritten ? ("rewrite" as const) : ("answer" as const),
      note: r.note,
      harness,
      when,
      where,
      uri: r.source.uri,
      line,
      trainedIn: r.trained_in.length ? r.trained_in.join(", ") : r.verdict === "good" ? "not yet" : "",
    };
    return { ...row, haystack: [row.verdict, row.prompt, row.answer, row.note, harness, when, where, row.trainedIn, r.id].join("\n").toLowerCase() };
  });
}

/** The search box: every word must occur in the row (any column); `good` / `bad` as a word pick the verdict. */
export function rowMatches(row: TaggedRow, query: string): boolean {
  return query
    .toLowerCase()
    .split(/\s+/)
    .filter(Boolean)
    .every((word) => (word === "good" || word === "bad" ? row.verdict === word : row.haystack.includes(word)));
}

export type RowAction = { type: "open"; id: string } | { type: "untag"; id: string } | { type: "note"; id: string } | { type: "flip"; id: string };

/** A message from the webview, checked (it is untrusted input): the action, or undefined. */
export function parseRowAction(msg: unknown): RowAction | undefined {
  if (typeof msg !== "object" || msg === null) return undefined;
  const { type, id } = msg as { type?: unknown; id?: unknown };
  if (typeof id !== "string" || !/^[\w-]{1,80}$/.test(id)) return undefined;
  return type === "open" || type === "untag" || type === "note" || type === "flip" ? { type, id } : undefined;
}

/** machine.retag's argument for a row action: a new note, or the other verdict. */
export function retagArgs(row: TaggedRow, change: { note: string } | { flip: true }): Record<string, unknown> {
  if ("note" in change) return { id: row.id, note: change.note };
  return { id: row.id, verdict: row.verdict === "good" ? "bad" : "good" };
}
