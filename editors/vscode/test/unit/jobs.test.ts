import assert from "node:assert/strict";
import { test } from "node:test";
import { applyEvent, currentJob, formatDuration, formatLoss, fraction, isJobEvent, outcomeText, panelSummary, runningIcon, shownJob, statusText, statusTooltip, type JobState } from "../../src/logic/jobs";

const feed = (events: Record<string, unknown>[]): Map<string, JobState> => {
  const jobs = new Map<string, JobState>();
  events.forEach((e, i) => {
    applyEvent(jobs, { event: String(e.event), ...e }, 1000 + i);
  });
  return jobs;
};

test("durations", () => {
  assert.equal(formatDuration(0), "0s");
  assert.equal(formatDuration(44.6), "45s");
  assert.equal(formatDuration(150), "2m 30s");
  assert.equal(formatDuration(3725), "1h 02m");
  assert.equal(formatDuration(-1), "?");
  assert.equal(formatDuration(Number.NaN), "?");
});

test("loss formatting", () => {
  assert.equal(formatLoss(0.42), "0.420");
  assert.equal(formatLoss(2.3456), "2.35");
  assert.equal(formatLoss(0), "0");
  assert.equal(formatLoss(0.00012), "1.20e-4");
});

test("a training run: start → steps → checkpoint → eval → done", () => {
  const jobs = feed([
    { event: "start", job_id: "j1", job: "train-run", run_id: "r", run_dir: "/ws/.machine/runs/r", total: 60, message: "training" },
    { event: "step", job_id: "j1", step: 1, total: 60, loss: 1.9, seconds_per_step: 3.1, eta_seconds: 183 },
    { event: "log", job_id: "j1", level: "info", message: "hello" },
    { event: "step", job_id: "j1", step: 12, total: 60, loss: 0.42, seconds_per_step: 3.1, eta_seconds: 150 },
  ]);
  const st = jobs.get("j1");
  assert.ok(st);
  assert.equal(statusText(st), "train-run · step 12/60 · loss 0.420 · eta 2m 30s");
  assert.equal(fraction(st), 0.2);
  assert.deepEqual(st.losses, [
    { step: 1, loss: 1.9 },
    { step: 12, loss: 0.42 },
  ]);
  assert.match(statusTooltip(st), /Click to cancel/);
  assert.equal(currentJob(jobs)?.id, "j1");
  applyEvent(jobs, { event: "checkpoint", job_id: "j1", name: "step-60", address: "local://r/step-60", step: 60 }, 2000);
  applyEvent(jobs, { event: "eval", job_id: "j1", name: "held-out", accuracy: 0.6667, correct: 16, n: 24, result_path: "eval_results/x.json" }, 2001);
  applyEvent(jobs, { event: "done", job_id: "j1", result: { ok: true }, message: "trained 60 steps" }, 2002);
  assert.equal(st.status, "done");
  assert.equal(statusText(st), "train-run · done");
  assert.equal(outcomeText(st), "trained 60 steps — checkpoint local://r/step-60, held-out accuracy 66.7% (16/24)");
  assert.equal(currentJob(jobs), undefined);
  assert.doesNotMatch(statusTooltip(st), /Click to cancel/);
});

test("a validate job reports rows done with a percentage", () => {
  const jobs = feed([
    { event: "start", job_id: "v", job: "validate", total: 100000 },
    { event: "progress", job_id: "v", done: 5000, total: 100000, message: "validated 5000/100000 rows" },
  ]);
  const st = jobs.get("v");
  assert.ok(st);
  assert.equal(statusText(st), "validate · 5000/100000 (5%)");
});

test("before any step the job is starting; errors and cancellation", () => {
  const jobs = feed([{ event: "start", job_id: "a", job: "train-smoke" }]);
  const a = jobs.get("a");
  assert.ok(a);
  assert.equal(statusText(a), "train-smoke · starting…");
  applyEvent(jobs, { event: "error", job_id: "a", message: "out of memory", kind: "crash" }, 5);
  assert.equal(a.status, "error");
  assert.equal(outcomeText(a), "train-smoke failed: out of memory");
  applyEvent(jobs, { event: "start", job_id: "b", job: "train-run" }, 6);
  applyEvent(jobs, { event: "error", job_id: "b", message: "cancelled by user", kind: "cancelled" }, 7);
  assert.equal(jobs.get("b")?.status, "cancelled");
  assert.equal(outcomeText(jobs.get("b") as JobState), "train-run cancelled: cancelled by user");
});

test("the newest running job is the one on the status bar", () => {
  const jobs = feed([
    { event: "start", job_id: "old", job: "validate" },
    { event: "start", job_id: "new", job: "train-run" },
  ]);
  assert.equal(currentJob(jobs)?.id, "new");
  applyEvent(jobs, { event: "done", job_id: "new" }, 9999);
  assert.equal(currentJob(jobs)?.id, "old");
});

test("junk is not a job event; non-numeric fields are ignored", () => {
  assert.equal(isJobEvent(null), false);
  assert.equal(isJobEvent({ step: 1 }), false);
  assert.equal(isJobEvent({ event: "step" }), true);
  const jobs = feed([{ event: "step", job_id: "x", step: "12", loss: "NaN" }]);
  const x = jobs.get("x");
  assert.ok(x);
  assert.equal(x.step, undefined);
  assert.deepEqual(x.losses, []);
});

test("the server's own end event settles the job (done, failed, cancelled)", () => {
  const jobs = feed([
    { event: "start", job_id: "a", job: "train-run" },
    { event: "end", job_id: "a", status: "failed", message: "Training run crashed (exit 1)" },
    { event: "start", job_id: "b", job: "validate" },
    { event: "done", job_id: "b", message: "x.jsonl: 2 rows, 1 errors" },
    { event: "end", job_id: "b", status: "done", message: "x.jsonl: 2 rows, 1 errors" },
    { event: "start", job_id: "c", job: "train-smoke" },
    { event: "end", job_id: "c", status: "cancelled", message: "Training smoke test cancelled" },
  ]);
  assert.equal(jobs.get("a")?.status, "error");
  assert.equal(outcomeText(jobs.get("a") as JobState), "train-run failed: Training run crashed (exit 1)");
  assert.equal(jobs.get("b")?.status, "done");
  assert.equal(jobs.get("b")?.endedAt, 1003, "the end time is the first terminal event's");
  assert.equal(jobs.get("c")?.status, "cancelled");
  assert.equal(currentJob(jobs), undefined);
});

test("the run panel's summary names the status bar's job with its status: never 'done' about a cancelled run", () => {
  // j1 (training) starts first, j2 (smoke) second; j2 ends done, then j1 is cancelled: the status bar shows j1.
  const jobs = feed([
    { event: "start", job_id: "j1", job: "train-run" },
    { event: "start", job_id: "j2", job: "train-smoke" },
    { event: "done", job_id: "j2", message: "smoke run done" },
    { event: "end", job_id: "j2", status: "done", message: "smoke run done" },
    { event: "step", job_id: "j1", step: 3, total: 10, loss: 1.5 },
    { event: "end", job_id: "j1", status: "cancelled", message: "Training run cancelled" },
  ]);
  assert.equal(shownJob(jobs)?.id, "j1");
  const summary = panelSummary(jobs);
  assert.equal(summary, "2 jobs, 0 running. train-run cancelled: Training run cancelled");
  assert.doesNotMatch(summary, /done/);
  // The child's own "done" followed by the server's "cancelled" end: the server's last word counts.
  const late = feed([
    { event: "start", job_id: "j3", job: "validate" },
    { event: "done", job_id: "j3", message: "big.jsonl: 3 rows, ok" },
    { event: "end", job_id: "j3", status: "cancelled", message: "Validate big.jsonl cancelled" },
  ]);
  assert.equal(panelSummary(late), "1 job, 0 running. validate cancelled: Validate big.jsonl cancelled");
  // A running job: the status bar's text.
  const running = feed([{ event: "start", job_id: "j4", job: "train-run" }, { event: "step", job_id: "j4", step: 2, total: 8, loss: 0.5 }]);
  assert.equal(panelSummary(running), "1 job, 1 running. train-run · step 2/8 · loss 0.500");
  assert.equal(panelSummary(new Map()), "");
});

test("a serve job stops spinning once it serves, and a working job is shown before it", () => {
  const jobs = new Map<string, JobState>();
  applyEvent(jobs, { event: "start", job_id: "s1", job: "serve", message: "Serve base: starting" }, 1);
  const serve = jobs.get("s1");
  assert.ok(serve);
  assert.equal(runningIcon(serve), "$(sync~spin)", "loading the model is work");
  applyEvent(jobs, { event: "ready", job_id: "s1", url: "http://127.0.0.1:8765", name: "base" }, 2);
  assert.equal(runningIcon(serve), "$(broadcast)");
  assert.equal(statusText(serve), "serve · serving at 127.0.0.1:8765");
  applyEvent(jobs, { event: "start", job_id: "t1", job: "smoke", total: 4 }, 0);
  assert.equal(currentJob(jobs)?.id, "t1", "the smoke run (started earlier) still comes first: it is working");
  applyEvent(jobs, { event: "end", job_id: "t1", status: "done" }, 3);
  assert.equal(currentJob(jobs)?.id, "s1");
});
