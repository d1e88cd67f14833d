import assert from "node:assert/strict";
import { test } from "node:test";
import { RestartPolicy } from "../../src/logic/backoff";

test("delays double up to the cap, then the policy gives up", () => {
  const p = new RestartPolicy({ initialMs: 1000, maxMs: 5000, maxCrashes: 5, windowMs: 60_000 });
  assert.deepEqual([0, 1, 2, 3, 4].map((i) => p.onCrash(i * 10)), [1000, 2000, 4000, 5000, 5000]);
  assert.equal(p.onCrash(100), undefined);
});

test("crashes outside the window are forgotten", () => {
  const p = new RestartPolicy({ initialMs: 1000, maxMs: 30_000, maxCrashes: 2, windowMs: 1000 });
  assert.equal(p.onCrash(0), 1000);
  assert.equal(p.onCrash(500), 2000);
  assert.equal(p.onCrash(600), undefined);
  assert.equal(p.onCrash(5000), 1000, "a crash long after starts over");
});

test("reset forgets crashes", () => {
  const p = new RestartPolicy({ initialMs: 10, maxMs: 100, maxCrashes: 1, windowMs: 1e9 });
  assert.equal(p.onCrash(0), 10);
  assert.equal(p.onCrash(1), undefined);
  p.reset();
  assert.equal(p.recentCrashes, 0);
  assert.equal(p.onCrash(2), 10);
});
