import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { applyEvent, type JobState } from "../../src/logic/jobs";
import { statusView } from "../../src/logic/status";
import { RESTRICTED_COMMANDS, restrictedCodeAction, restrictedRefusal } from "../../src/logic/trust";

const EXTENSION = path.resolve(__dirname, "../../.."); // out/test/unit -> the extension folder

test("the status item names the server state, the served checkpoint and the running job", () => {
  const jobs = new Map<string, JobState>();
  const idle = statusView({ server: "running", serverInfo: "machine-lsp 0.1.0", interpreter: "/v/bin/python", restricted: false, served: { status: "stopped" } });
  assert.equal(idle.text, "$(pass) Machine");
  assert.match(idle.tooltip, /^Machine: server running \(machine-lsp 0\.1\.0\)\nPython: \/v\/bin\/python\nServed checkpoint: none\nJob: none running\nClick: show the server log\.$/);
  applyEvent(jobs, { event: "start", job_id: "j1", job: "smoke", total: 10 }, 1);
  applyEvent(jobs, { event: "step", job_id: "j1", step: 3, total: 10, loss: 1.25 }, 2);
  const busy = statusView({ server: "running", restricted: false, served: { status: "serving", checkpoint: "base", url: "http://127.0.0.1:8765" }, job: jobs.get("j1") });
  assert.equal(busy.text, "$(pass) Machine · serving base · smoke · step 3/10 · loss 1.25");
  assert.match(busy.tooltip, /Served checkpoint: base at http:\/\/127\.0\.0\.1:8765 \(serving\)/);
  assert.equal(busy.busy, true);
  const failed = statusView({ server: "failed", problem: "Python not found: python3.", restricted: false, served: { status: "stopped" } });
  assert.equal(failed.severity, "error");
  assert.match(failed.tooltip, /Python not found/);
  const restricted = statusView({ server: "running", restricted: true, served: { status: "stopped" } });
  assert.equal(restricted.text, "$(shield) Machine");
  assert.equal(restricted.detail, "Restricted Mode: diagnostics and hovers only");
  assert.match(restricted.tooltip, /Off until you trust the folder: tagging, the Sessions view, training/);
});

test("Restricted Mode: quick fixes keep their edits, tag and job commands wait for trust", () => {
  assert.equal(restrictedRefusal("machineLsp.smoke", true), undefined);
  assert.equal(restrictedRefusal("machineLsp.showOutput", false), undefined);
  assert.match(restrictedRefusal("machineLsp.smoke", false, "Smoke Run") ?? "", /^Machine: Smoke Run is off in Restricted Mode .*Trust the folder/);
  const fix = { title: "Fix JSON", edit: { changes: {} } };
  assert.equal(restrictedCodeAction(fix), fix);
  assert.equal(restrictedCodeAction({ title: "Tag row as good", command: { command: "machine.tag" } }), undefined);
  const both = { title: "Fix and validate", edit: { changes: {} }, command: { command: "machine.validate" } };
  assert.deepEqual(restrictedCodeAction(both), { title: "Fix and validate", edit: { changes: {} } });
});

interface Pkg {
  icon?: string;
  capabilities: { untrustedWorkspaces: { supported: boolean | string; description?: string; restrictedConfigurations?: string[] } };
  contributes: {
    commands: { command: string; title: string }[];
    configuration: { properties: Record<string, unknown> };
    viewsContainers?: { activitybar?: { id: string; icon: string }[] };
    views: Record<string, { id: string; icon?: string }[]>;
    walkthroughs?: { id: string; steps: { id: string; description: string; media: { markdown?: string; image?: string } }[] }[];
  };
}

test("package.json: limited Restricted Mode, an icon, the Sessions view in its own container, a walkthrough", () => {
  const pkg = JSON.parse(fs.readFileSync(path.join(EXTENSION, "package.json"), "utf8")) as Pkg;
  const trust = pkg.capabilities.untrustedWorkspaces;
  assert.equal(trust.supported, "limited");
  assert.match(trust.description ?? "", /diagnostics .* hovers/);
  // Every machine.* setting that picks what runs or what a job reads is the user's alone in an untrusted folder.
  for (const key of ["machine.python", "machine.importStrategy", "machine.data.train", "machine.engine"]) assert.ok(trust.restrictedConfigurations?.includes(key), key);
  for (const key of trust.restrictedConfigurations ?? []) assert.ok(key in pkg.contributes.configuration.properties, `${key} is no setting`);
  for (const id of RESTRICTED_COMMANDS) assert.ok(pkg.contributes.commands.some((c) => c.command === id), `${id} is not contributed`);
  const ignore = fs.readFileSync(path.join(EXTENSION, ".vscodeignore"), "utf8");
  const packaged = (file: string): boolean => ignore.split("\n").some((l) => l.startsWith("!") && path.matchesGlob(file, l.slice(1)));
  const icon = pkg.icon ?? "";
  assert.deepEqual([...fs.readFileSync(path.join(EXTENSION, icon)).subarray(1, 4)].map((b) => String.fromCharCode(b)).join(""), "PNG");
  assert.ok(packaged(icon), `${icon} is left out of the .vsix`);
  const container = pkg.contributes.viewsContainers?.activitybar?.find((c) => c.id === "machine");
  assert.ok(container && fs.existsSync(path.join(EXTENSION, container.icon)) && packaged(container.icon));
  assert.ok(pkg.contributes.views.machine?.some((v) => v.id === "machineLsp.sessions"), "the Sessions view is in the Machine container");
  assert.ok(!pkg.contributes.views.explorer?.some((v) => v.id === "machineLsp.sessions"), "not at the bottom of the Explorer");
  const walk = pkg.contributes.walkthroughs?.[0];
  assert.deepEqual(walk?.steps.map((s) => s.id), ["openJsonl", "tag", "environment", "smoke"]);
  const contributed = new Set(pkg.contributes.commands.map((c) => c.command));
  for (const step of walk?.steps ?? []) {
    const media = step.media.markdown ?? step.media.image ?? "";
    assert.ok(fs.existsSync(path.join(EXTENSION, media)) && packaged(media), `${media} is missing or left out of the .vsix`);
    for (const m of step.description.matchAll(/\(command:([\w.]+)/g)) if (m[1]?.startsWith("machineLsp.")) assert.ok(contributed.has(m[1]), `${m[1]} in step ${step.id}`);
  }
});
