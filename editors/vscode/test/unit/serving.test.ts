import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import type { ServeReply, TinkerServerReply, UseReply } from "../../src/generated/replies";
import { SERVER_COMMANDS, type CheckpointChoice } from "../../src/logic/args";
import { applyEvent, statusText, type JobState } from "../../src/logic/jobs";
import { AGENTS, applyServeEvent, checkpointChoices, openaiBase, servedFromReply, servedMenu, servedStatus, serveArgs, tinkerServeArgs, tinkerStatus, useArgs, useDetail, type ServedState } from "../../src/logic/serving";

const runs: CheckpointChoice[] = [
  { address: "local://run-2/final", label: "run-2 / final", description: "local · 2026-12-01", sortKey: "b" },
  { address: "tinker://abc/sampler_weights/final", label: "run-1 / final", description: "tinker", sortKey: "a" },
];

test("Serve Checkpoint offers latest, base, then local checkpoints; Use also offers tinker:// ones", () => {
  const serve = checkpointChoices(runs, "serve").map((c) => c.checkpoint);
  assert.deepEqual(serve, ["latest", "base", "local://run-2/final"]);
  const use = checkpointChoices(runs, "use").map((c) => c.checkpoint);
  assert.deepEqual(use, ["latest", "base", "local://run-2/final", "tinker://abc/sampler_weights/final"]);
});

test("serve and use arguments are checked before they are sent", () => {
  assert.deepEqual(serveArgs(" base ", 0), { checkpoint: "base", port: 0 });
  assert.throws(() => serveArgs("base", 70000), /0-65535/);
  assert.throws(() => serveArgs(" ", 8765), /Pick a checkpoint/);
  assert.deepEqual(useArgs("latest", "pi", false), { checkpoint: "latest", agent: "pi", write: false });
  assert.throws(() => useArgs("latest", "vim", true), /Unknown agent vim/);
  assert.deepEqual([...AGENTS], ["pi", "codex", "claude", "opencode"]);
  assert.deepEqual(tinkerServeArgs(undefined, undefined), {});
  assert.deepEqual(tinkerServeArgs(" /m ", 8001), { model: "/m", port: 8001 });
});

test("the served item follows the serve job: start → ready → end; other jobs change nothing", () => {
  let st: ServedState = { status: "stopped" };
  st = applyServeEvent(st, { event: "start", job: "validate", job_id: "v1" });
  assert.equal(st.status, "stopped");
  st = applyServeEvent(st, { event: "start", job: "serve", job_id: "s1" });
  assert.equal(st.status, "starting");
  assert.equal(servedStatus(st).text, "$(loading~spin) Serving checkpoint…");
  st = applyServeEvent(st, { event: "ready", job_id: "other", url: "http://127.0.0.1:1" });
  assert.equal(st.status, "starting");
  st = applyServeEvent(st, { event: "ready", job_id: "s1", url: "http://127.0.0.1:8765", name: "base", message: "serving base" });
  assert.deepEqual({ status: st.status, url: st.url, checkpoint: st.checkpoint }, { status: "serving", url: "http://127.0.0.1:8765", checkpoint: "base" });
  const item = servedStatus(st);
  assert.equal(item.text, "$(broadcast) base · 127.0.0.1:8765");
  assert.match(item.tooltip, /http:\/\/127\.0\.0\.1:8765\/v1/);
  assert.deepEqual(servedMenu(st).map((m) => m.action), ["copy", "use", "stop"]);
  st = applyServeEvent(st, { event: "end", job_id: "s1", status: "failed", message: "Serve base crashed (exit -9)" });
  assert.equal(st.status, "stopped");
  assert.equal(st.message, "Serve base crashed (exit -9)");
  assert.equal(servedStatus(st).visible, false);
  assert.deepEqual(servedMenu(st), []);
});

test("a serve reply sets the item (status after a restart, a start, a stop)", () => {
  const reply: ServeReply = {
    status: "serving", message: "serving base at http://127.0.0.1:9/v1", checkpoint: "base", url: "http://127.0.0.1:9", openai_base: "http://127.0.0.1:9/v1",
    model: "machine", port: 9, job_id: "j", pid: 1, served_dir: "/p/.machine/served", already_running: false, swaps: 0, last_swap: null,
  };
  assert.deepEqual(servedFromReply(reply), { status: "serving", checkpoint: "base", url: "http://127.0.0.1:9", jobId: "j", message: reply.message });
  assert.equal(openaiBase("http://127.0.0.1:9/"), "http://127.0.0.1:9/v1");
});

test("Use Checkpoint shows the file, the entry, warnings and notes before writing", () => {
  const reply: UseReply = {
    agent: "codex", checkpoint: "base", path: "/home/u/.codex/config.toml", text: "[model_providers.machine]\nwire_api = \"responses\"\n",
    notes: ["start the server first"], warnings: ["codex sends ~6600 tokens per request"], written: [], local: true, port: 8765, serving: false, message: "",
  };
  const detail = useDetail(reply);
  assert.ok(detail.startsWith("/home/u/.codex/config.toml:\n\n[model_providers.machine]"));
  assert.match(detail, /⚠ codex sends ~6600 tokens/);
  assert.match(detail, /start the server first$/);
});

test("the Tinker item: hidden when stopped, the base URL when running", () => {
  assert.equal(tinkerStatus(undefined).visible, false);
  const stopped: TinkerServerReply = { status: "stopped", message: "no Tinker server running for this project", base_url: null, pid: null, model: null, log: null, started_at: null, answering: null, config: null, job_id: null, already_running: false, stale_record_removed: false };
  assert.equal(tinkerStatus(stopped).visible, false);
  const running = { ...stopped, status: "running" as const, base_url: "http://127.0.0.1:8000", pid: 42, answering: true };
  assert.equal(tinkerStatus(running).text, "$(server-process) Tinker · 127.0.0.1:8000");
  assert.match(tinkerStatus(running).tooltip, /TINKER_BASE_URL=http:\/\/127\.0\.0\.1:8000/);
  assert.match(tinkerStatus({ ...running, answering: false }).text, /not answering yet/);
  assert.match(tinkerStatus({ ...running, status: "starting" }).text, /starting/);
});

test("package.json contributes the serving commands and the port setting", () => {
  const pkg = JSON.parse(fs.readFileSync(path.resolve(__dirname, "../../../package.json"), "utf8")) as {
    contributes: { commands: { command: string; title: string }[]; configuration: { properties: Record<string, { default?: unknown }> } };
  };
  const titles = new Map(pkg.contributes.commands.map((c) => [c.command, c.title]));
  assert.equal(titles.get("machineLsp.serveCheckpoint"), "Serve Checkpoint…");
  assert.equal(titles.get("machineLsp.stopServing"), "Stop Serving");
  assert.equal(titles.get("machineLsp.useCheckpoint"), "Use Checkpoint in Agent…");
  assert.equal(titles.get("machineLsp.startTinkerServer"), "Start Local Tinker Server");
  assert.equal(titles.get("machineLsp.stopTinkerServer"), "Stop Local Tinker Server");
  assert.equal(pkg.contributes.configuration.properties["machine.serve.port"]?.default, 8765);
  assert.equal(SERVER_COMMANDS.serveStart, "machine.serve.start");
});

test("the job item says 'running' for a job without a count (serve), never a bare 0", () => {
  const jobs = new Map<string, JobState>();
  applyEvent(jobs, { event: "start", job: "serve", job_id: "s" }, 1);
  const st = applyEvent(jobs, { event: "progress", job_id: "s", done: 0, total: null, message: "loading base …" }, 2);
  assert.equal(statusText(st), "serve · running");
});
