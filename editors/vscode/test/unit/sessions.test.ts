import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import type { SessionEntry, SessionTurn, TaggedReply, TagPreview } from "../../src/generated/replies";
import { flat, fromSpec, pairsMark, previewText, recordSources, revealTarget, SESSION_UI_COMMANDS, SESSIONS_VIEW, sessionView, turnView, when } from "../../src/logic/sessions";

const turn = (over: Partial<SessionTurn> = {}): SessionTurn => ({
  number: 2, line: 7, end_line: 9, uri: "file:///home/u/.claude/projects/-ws/a5ba.jsonl",
  prompt: "Run\n  echo hi", answer: "It printed hi.", blocked: null, verdict: null, rewritten: false, records: [], conflict: false, pairs: 0,
  ...over,
});

test("a session shows its first prompt, harness, turn count and time", () => {
  const now = new Date(2026, 10, 30, 18, 0);
  const s: SessionEntry = {
    harness: "claude-code", id: "a5ba8927", path: "/h/.claude/projects/-ws/a5ba8927.jsonl", cwd: "/ws",
    updated: new Date(2026, 10, 30, 9, 5).getTime() / 1000, turns: 1, first_prompt: "Say hello\nin five words.", problem: null,
  };
  const v = sessionView(s, now);
  assert.equal(v.label, "Say hello in five words.");
  assert.equal(v.description, "claude-code · 1 turn · 09:05");
  assert.equal(v.contextValue, "machineSession");
  const other = sessionView({ ...s, turns: null, first_prompt: "", problem: "broken line 3", updated: new Date(2026, 10, 28, 7, 1).getTime() / 1000 }, now);
  assert.equal(other.label, "a5ba8927");
  assert.equal(other.description, "claude-code · ? turns · 11-28 07:01");
  assert.equal(other.icon, "warning");
  assert.match(other.tooltip, /cannot read: broken line 3/);
});

test("turns show their tag: untagged, good, rewritten, bad, contradicting", () => {
  const plain = turnView(turn());
  assert.equal(plain.label, "2. Run echo hi");
  assert.equal(plain.description, "It printed hi.");
  assert.equal(plain.contextValue, "machineTurn");
  assert.equal(plain.icon, "circle-outline");
  const good = turnView(turn({ verdict: "good", records: ["r1"] }));
  assert.equal(good.description, "✓ good · It printed hi.");
  assert.equal(good.contextValue, "machineTurn.good");
  assert.equal(good.icon, "thumbsup-filled");
  assert.match(turnView(turn({ verdict: "good", rewritten: true })).description, /^✓ good \(rewritten\)/);
  const bad = turnView(turn({ verdict: "bad" }));
  assert.equal(bad.icon, "thumbsdown-filled");
  assert.equal(bad.contextValue, "machineTurn.bad");
  const both = turnView(turn({ verdict: "good", records: ["r1", "r2"], conflict: true }));
  assert.equal(both.icon, "warning");
  assert.match(both.tooltip, /2 tags disagree: the last stands/);
  assert.match(turnView(turn({ blocked: "the reply was aborted" })).tooltip, /cannot be good: the reply was aborted/);
});

test("opening a turn reveals its last line in a text log, never in a database", () => {
  assert.deepEqual(revealTarget(turn()), { uri: "file:///home/u/.claude/projects/-ws/a5ba.jsonl", line: 8 });
  assert.equal(revealTarget(turn({ uri: "file:///home/u/.local/share/opencode/opencode.db" })), undefined);
});

test("from names a session's turn; flat and when format like the CLI", () => {
  assert.equal(fromSpec("a5ba8927", 3), "a5ba8927:3");
  assert.equal(flat("a\n b\t c", 80), "a b c");
  assert.equal(flat("abcdef", 4), "abc…");
  assert.equal(when(new Date(2026, 0, 2, 3, 4).getTime() / 1000, new Date(2026, 0, 2, 23, 0)), "03:04");
});

test("the preview lists harness, session, prompt and answer, and says when it is a duplicate", () => {
  const p: TagPreview = {
    preview: true, verdict: "good", harness: "codex", session_id: "01a22d9b", where: "/h/.codex/rollout.jsonl:12",
    prompt: "Say hello in five words.", answer: "Hello there, how are you?", duplicate_of: null,
    record: {
      id: "x", verdict: "good", created_at: "2026-11-30T18:00:00Z", tool_version: "0.1.0",
      source: { kind: "session_log", uri: "file:///h/.codex/rollout.jsonl" },
      messages: [{ role: "user", content: "Say hello in five words." }, { role: "assistant", content: "Hello there, how are you?" }],
    },
  };
  const text = previewText(p);
  assert.equal(text.message, "Tag the last turn of this codex session as good?");
  assert.equal(
    text.detail,
    "From: codex session 01a22d9b (/h/.codex/rollout.jsonl:12)\n\nPrompt:\nSay hello in five words.\n\nAnswer:\nHello there, how are you?",
  );
  const dup = previewText({ ...p, verdict: "bad", duplicate_of: "r9", answer: "x".repeat(700) }, 100);
  assert.match(dup.detail, /Already tagged bad \(record r9\): confirming adds nothing\.$/);
  assert.match(dup.detail, /Answer:\nx{99}…/);
});

interface Contributes {
  commands: { command: string; title: string }[];
  views: Record<string, { id: string; name: string }[]>;
  menus: Record<string, { command: string; when?: string; group?: string }[]>;
}

test("package.json contributes the Sessions view, its commands, and inline tags on the turns turnView marks", () => {
  // out/test/unit/ -> the extension folder
  const pkg = JSON.parse(fs.readFileSync(path.resolve(__dirname, "../../../package.json"), "utf8")) as { contributes: Contributes };
  const c = pkg.contributes;
  const contributed = new Set(c.commands.map((x) => x.command));
  for (const id of Object.values(SESSION_UI_COMMANDS)) assert.ok(contributed.has(id), `${id} is not in contributes.commands`);
  assert.equal(c.commands.find((x) => x.command === SESSION_UI_COMMANDS.tagLastGood)?.title, "Tag Last Agent Turn as Good…");
  assert.ok(Object.values(c.views).flat().some((v) => v.id === SESSIONS_VIEW && v.name === "Sessions"));
  assert.ok(c.menus["view/title"]?.some((m) => m.command === SESSION_UI_COMMANDS.refresh && m.when === `view == ${SESSIONS_VIEW}`));
  const inline = (c.menus["view/item/context"] ?? []).filter((m) => m.group?.startsWith("inline"));
  for (const id of [SESSION_UI_COMMANDS.tagGood, SESSION_UI_COMMANDS.tagBad]) {
    const entry = inline.find((m) => m.command === id);
    assert.ok(entry?.when, `${id} has no inline menu entry`);
    const pattern = /viewItem =~ \/(.+)\//.exec(entry.when)?.[1];
    assert.ok(pattern, entry.when);
    const shown = new RegExp(pattern);
    for (const verdict of [null, "good", "bad"] as const) assert.ok(shown.test(turnView(turn({ verdict })).contextValue), `${id} hidden on a ${String(verdict)} turn`);
    assert.ok(!shown.test(sessionView({ harness: "pi", id: "s", path: "/p", cwd: "/", updated: 0, turns: 1, first_prompt: "", problem: null }).contextValue));
  }
});

test("a turn whose prompt makes preference pairs says so (⇄ N pairs)", () => {
  assert.equal(pairsMark(turn()), "");
  const one = turnView(turn({ verdict: "good", rewritten: true, records: ["r1"], pairs: 1 }));
  assert.equal(one.description, "✓ good (rewritten) · ⇄ 1 pair · It printed hi.");
  assert.match(one.tooltip, /makes 1 preference pair \(DPO, SFT then DPO train on them\)/);
  assert.equal(turnView(turn({ verdict: "bad", records: ["r2"], pairs: 2 })).description, "✓ bad · ⇄ 2 pairs · It printed hi.");
  assert.doesNotMatch(turnView(turn({ verdict: "bad" })).tooltip, /pair/);
});

test("a turn tagged through an identical turn of another log says where the tag was made", () => {
  const here = "file:///home/u/.claude/projects/-ws/a5ba.jsonl";
  const record = (id: string, uri: string, session: string | null): TaggedReply["records"][number] => ({
    id, verdict: "good", note: "", answer: "It printed hi.", rewritten: false, trace: false, created_at: "2026-12-01T10:00:00Z", prompt: "Run echo hi", trained_in: [],
    source: { kind: "session_log", uri, line: 9, session_id: session, harness: "claude-code" },
  });
  const reply: TaggedReply = { store: "/ws/.machine/tagged.jsonl", warnings: [], records: [record("r1", "file:///home/u/.codex/sessions/b7c.jsonl", "019a-b7c0-0000"), record("r2", here, "a5ba")] };
  const sources = recordSources(reply);
  const elsewhere = turnView(turn({ verdict: "good", records: ["r1"] }), sources);
  assert.match(elsewhere.description, /^✓ good \(same exchange tagged elsewhere\)/);
  assert.match(elsewhere.tooltip, /tagged from session 019a-b7c0-0000 \(b7c\.jsonl:9\): the same prompt and answer, so the tag holds here too/);
  const local = turnView(turn({ verdict: "good", records: ["r2"] }), sources);
  assert.doesNotMatch(local.tooltip, /tagged from/, "tagged from this log: nothing to explain");
  assert.doesNotMatch(turnView(turn({ verdict: "good", records: ["r1", "r2"] }), sources).tooltip, /tagged from/);
  assert.doesNotMatch(turnView(turn({ verdict: "good", records: ["r9"] }), sources).tooltip, /tagged from/, "an unknown record: no guess");
});
