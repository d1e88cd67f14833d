// The README of the .vsix (its extension page): README.md without its screenshots. VS Code's extension page loads
// images over https only, and this extension has no public repository for vsce to point relative links at, so a
// relative image there shows as a broken one. The repository's README keeps them.
//   node scripts/vsix-readme.mjs   (writes dist/README.md; `npm run package` passes it to vsce --readme-path)
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

const EXT_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const IMAGE_LINE = /^\s*!\[[^\]]*\]\((?!https:)[^)]*\)\s*$/;

const source = fs.readFileSync(path.join(EXT_DIR, "README.md"), "utf8");
const out = source
  .split("\n")
  .filter((line) => !IMAGE_LINE.test(line))
  .join("\n")
  .replace(/\n{3,}/g, "\n\n");
const left = /!\[[^\]]*\]\((?!https:)[^)]*\)|<img\s[^>]*src="(?!https:)/.exec(out);
if (left) {
  console.error(`vsix-readme: README.md has a relative image inside a line of text, which the extension page cannot show: ${left[0]}`);
  process.exit(1);
}
fs.mkdirSync(path.join(EXT_DIR, "dist"), { recursive: true });
fs.writeFileSync(path.join(EXT_DIR, "dist", "README.md"), out);
console.log(`vsix-readme: dist/README.md (${source.split("\n").length - out.split("\n").length} lines of screenshots left out)`);
