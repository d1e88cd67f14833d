import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { PALETTE_TITLES, UNTRUSTED_COMMANDS } from "../../src/generated/palette";

const EXTENSION = path.resolve(__dirname, "../../.."); // out/test/unit -> the extension folder

interface Pkg {
  contributes: { commands: { command: string; title: string }[] };
}

/** The extension's own sources, without the generated files (which name every command). */
function handwrittenSources(): string {
  const src = path.join(EXTENSION, "src");
  return fs
    .readdirSync(src, { recursive: true, encoding: "utf8" })
    .filter((f) => f.endsWith(".ts") && !f.startsWith(`generated${path.sep}`))
    .map((f) => fs.readFileSync(path.join(src, f), "utf8"))
    .join("\n");
}

test("every palette command generated from the verb registry has a handler in the extension, and its title", () => {
  const pkg = JSON.parse(fs.readFileSync(path.join(EXTENSION, "package.json"), "utf8")) as Pkg;
  const sources = handwrittenSources();
  assert.ok(pkg.contributes.commands.length >= 37);
  for (const { command, title } of pkg.contributes.commands) {
    assert.ok(sources.includes(JSON.stringify(command)), `${command} is contributed but no source registers it`);
    assert.equal(PALETTE_TITLES[command], title, command);
  }
  assert.deepEqual([...UNTRUSTED_COMMANDS].sort(), ["machineLsp.openPanel", "machineLsp.restartServer", "machineLsp.showOutput"]);
});
