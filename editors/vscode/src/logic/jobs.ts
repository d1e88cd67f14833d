/** machine/jobEvent notifications → job state, status-bar text and outcome messages. Pure: no `vscode` import. */

export interface JobEvent {
  event: string;
  job_id?: string;
  [key: string]: unknown;
}

export type JobStatus = "running" | "done" | "error" | "cancelled";

export interface JobState {
  id: string;
  job: string;
  status: JobStatus;
  step?: number;
  total?: number;
  loss?: number;
  secondsPerStep?: number;
  etaSeconds?: number;
  done?: number;
  message?: string;
  runDir?: string;
  losses: { step: number; loss: number }[];
  checkpoints: { name: string; address: string; step?: number }[];
  evals: { name: string; accuracy: number; correct?: number; n?: number; resultPath?: string }[];
  result?: unknown;
  startedAt: number;
  endedAt?: number;
  /** A serve job that answers requests (its `ready` event): the URL. Serving is no progress to spin for. */
  servingUrl?: string;
}

const num = (v: unknown): number | undefined => (typeof v === "number" && Number.isFinite(v) ? v : undefined);
const str = (v: unknown): string | undefined => (typeof v === "string" ? v : undefined);

export function isJobEvent(v: unknown): v is JobEvent {
  return typeof v === "object" && v !== null && typeof (v as { event?: unknown }).event === "string";
}

/** "45s", "2m 05s", "1h 03m". */
export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return "?";
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}

export function formatLoss(loss: number): string {
  if (loss === 0) return "0";
  return Math.abs(loss) >= 100 || Math.abs(loss) < 0.001 ? loss.toExponential(2) : loss.toPrecision(3);
}

/** Applies one event to the tracked jobs (mutates and returns the job's state). */
export function applyEvent(jobs: Map<string, JobState>, ev: JobEvent, now: number): JobState {
  const id = ev.job_id ?? "job";
  let st = jobs.get(id);
  if (!st) {
    st = { id, job: str(ev.job) ?? "job", status: "running", losses: [], checkpoints: [], evals: [], startedAt: now };
    jobs.set(id, st);
  }
  switch (ev.event) {
    case "start":
      st.job = str(ev.job) ?? st.job;
      st.total = num(ev.total) ?? st.total;
      st.runDir = str(ev.run_dir) ?? st.runDir;
      st.message = str(ev.message) ?? st.message;
      break;
    case "step": {
      st.step = num(ev.step) ?? st.step;
      st.total = num(ev.total) ?? st.total;
      st.loss = num(ev.loss) ?? st.loss;
      st.secondsPerStep = num(ev.seconds_per_step) ?? st.secondsPerStep;
      st.etaSeconds = num(ev.eta_seconds) ?? st.etaSeconds;
      if (st.step !== undefined && st.loss !== undefined && num(ev.loss) !== undefined) st.losses.push({ step: st.step, loss: st.loss });
      break;
    }
    case "progress":
      st.done = num(ev.done) ?? st.done;
      st.total = num(ev.total) ?? st.total;
      st.message = str(ev.message) ?? st.message;
      break;
    case "ready":
      st.servingUrl = str(ev.url) ?? st.servingUrl;
      st.message = str(ev.message) ?? st.message;
      break;
    case "checkpoint": {
      const address = str(ev.address);
      if (address) st.checkpoints.push({ name: str(ev.name) ?? address, address, ...(num(ev.step) !== undefined ? { step: num(ev.step) } : {}) });
      break;
    }
    case "eval": {
      const accuracy = num(ev.accuracy);
      if (accuracy !== undefined) {
        st.evals.push({
          name: str(ev.name) ?? "eval",
          accuracy,
          ...(num(ev.correct) !== undefined ? { correct: num(ev.correct) } : {}),
          ...(num(ev.n) !== undefined ? { n: num(ev.n) } : {}),
          ...(str(ev.result_path) ? { resultPath: str(ev.result_path) } : {}),
        });
      }
      break;
    }
    case "done":
      st.status = "done";
      st.result = ev.result;
      st.message = str(ev.message) ?? st.message;
      st.endedAt = now;
      break;
    case "error": {
      const kind = str(ev.kind);
      st.status = kind === "cancelled" ? "cancelled" : "error";
      st.message = str(ev.message) ?? st.message;
      st.endedAt = now;
      break;
    }
    case "end": {
      // the server's own last word on a job: {status: done|failed|cancelled, message}; it overrides the child's
      const status = str(ev.status);
      st.status = status === "done" ? "done" : status === "cancelled" ? "cancelled" : "error";
      st.message = str(ev.message) ?? st.message;
      st.endedAt ??= now;
      break;
    }
    case "cancelled":
      st.status = "cancelled";
      st.message = str(ev.message) ?? "cancelled";
      st.endedAt = now;
      break;
    default:
      break; // "log" and unknown events change nothing here
  }
  return st;
}

/** Fraction done in [0, 1], when known. */
export function fraction(st: JobState): number | undefined {
  if (st.total === undefined || st.total <= 0) return undefined;
  const done = st.step ?? st.done;
  if (done === undefined) return undefined;
  return Math.max(0, Math.min(1, done / st.total));
}

/** The status-bar text (without the icon): "train-run · step 12/60 · loss 0.420 · eta 2m 30s". */
export function statusText(st: JobState): string {
  const parts: string[] = [st.job];
  if (st.status === "running" && st.servingUrl !== undefined) parts.push(`serving at ${st.servingUrl.replace(/^https?:\/\//, "")}`);
  else if (st.status === "running") {
    if (st.step !== undefined) parts.push(st.total !== undefined ? `step ${st.step}/${st.total}` : `step ${st.step}`);
    else if (st.done !== undefined) {
      const f = fraction(st);
      // A job without a count (serve, tinker-serve: "loading…", "waiting for the server"): no bare "0".
      parts.push(st.total !== undefined ? `${st.done}/${st.total}${f !== undefined ? ` (${Math.round(f * 100)}%)` : ""}` : st.done > 0 ? `${st.done}` : "running");
    } else parts.push("starting…");
    if (st.loss !== undefined) parts.push(`loss ${formatLoss(st.loss)}`);
    if (st.etaSeconds !== undefined) parts.push(`eta ${formatDuration(st.etaSeconds)}`);
  } else {
    parts.push(st.status);
  }
  return parts.join(" · ");
}

/** The tooltip: what runs and how to stop it. */
export function statusTooltip(st: JobState): string {
  const lines = [`Machine job ${st.id} (${st.job}): ${st.status}`];
  if (st.message) lines.push(st.message);
  if (st.secondsPerStep !== undefined) lines.push(`${st.secondsPerStep.toFixed(2)} s/step`);
  if (st.runDir) lines.push(`run dir: ${st.runDir}`);
  if (st.status === "running") lines.push("Click to cancel.");
  return lines.join("\n");
}

/** The message of the final notification. */
export function outcomeText(st: JobState): string {
  const base = st.message ?? `${st.job} ${st.status}`;
  if (st.status !== "done") return `${st.job} ${st.status === "cancelled" ? "cancelled" : "failed"}: ${base}`;
  const extra: string[] = [];
  const lastCkpt = st.checkpoints.at(-1);
  if (lastCkpt && !base.includes(lastCkpt.address)) extra.push(`checkpoint ${lastCkpt.address}`);
  const lastEval = st.evals.at(-1);
  if (lastEval && !/accuracy|acc\b|%/i.test(base)) {
    const counts = lastEval.correct !== undefined && lastEval.n !== undefined ? ` (${lastEval.correct}/${lastEval.n})` : "";
    extra.push(`${lastEval.name} accuracy ${(lastEval.accuracy * 100).toFixed(1)}%${counts}`);
  }
  return extra.length ? `${base} — ${extra.join(", ")}` : base;
}

/** The most relevant job for the single status-bar item: the latest running one, else undefined. */
export function currentJob(jobs: Map<string, JobState>): JobState | undefined {
  let best: JobState | undefined;
  // A job at work (training, evaluating, loading) comes before a server that is up and waiting for requests.
  const rank = (st: JobState): number => (st.servingUrl === undefined ? 1 : 0);
  for (const st of jobs.values()) {
    if (st.status !== "running") continue;
    if (!best || rank(st) > rank(best) || (rank(st) === rank(best) && st.startedAt >= best.startedAt)) best = st;
  }
  return best;
}

/** The status-bar icon of a running job: a spinner while it works, a broadcast once it only serves. */
export function runningIcon(st: JobState): string {
  return st.servingUrl !== undefined ? "$(broadcast)" : "$(sync~spin)";
}

/** The job the status bar shows: the latest running one, else the one that ended last. */
export function shownJob(jobs: Map<string, JobState>): JobState | undefined {
  return currentJob(jobs) ?? [...jobs.values()].sort((a, b) => (b.endedAt ?? 0) - (a.endedAt ?? 0))[0];
}

/**
 * The run panel's summary line: the same job, status and words as the status bar, so the panel never says
 * "done" about a job the status bar calls cancelled (or shows another job's message).
 */
export function panelSummary(jobs: Map<string, JobState>): string {
  const st = shownJob(jobs);
  if (!st) return "";
  const running = [...jobs.values()].filter((j) => j.status === "running").length;
  const head = `${jobs.size} job${jobs.size === 1 ? "" : "s"}, ${running} running.`;
  return `${head} ${st.status === "running" ? statusText(st) : outcomeText(st)}`;
}
