import assert from "node:assert/strict";
import { test } from "node:test";
import { folderScope } from "../../src/logic/client";

test("one project per window: with several folders the first is the project, and the message says so", () => {
  assert.deepEqual(folderScope([]), { folder: undefined, notice: undefined });
  assert.deepEqual(folderScope([{ name: "a", fsPath: "/w/a" }]), { folder: "/w/a", notice: undefined });
  const two = folderScope([{ name: "a", fsPath: "/w/a" }, { name: "b", fsPath: "/w/b" }, { name: "c", fsPath: "/w/c" }]);
  assert.equal(two.folder, "/w/a");
  assert.match(two.notice ?? "", /those of “a”, and tags made in b, c go there too/);
});
