// Unit tests of the dashboard's browser logic that needs no DOM: run by tests/web/test_js.py
// through `node --test` (Node's built-in runner; nothing to install).

import assert from "node:assert/strict";
import { test } from "node:test";

import { recordsOf, sampleTimes } from "../../../controlplane/web/static/web/events.js";
import { rangeFromSearch, searchOf, windowOf } from "../../../controlplane/web/static/web/range.js";
import { entityKey, lineTakes, parseKey, seriesKey } from "../../../controlplane/web/static/web/series.js";
import { Columns } from "../../../controlplane/web/static/web/timeseries.js";
import { axisFor, formatCell, ticks, timeTick, withUnit } from "../../../controlplane/web/static/web/units.js";

test("history and live points meet in one sorted column store", () => {
  const cols = new Columns();
  cols.load([{ key: "a", points: [[1, 1], [2, 2]], scale: 10 }, { key: "b", points: [[2, 5]], scale: 1 }]);
  assert.deepEqual(cols.data(), [[1, 2], [10, 20], [undefined, 5]]);
  cols.set(3, 0, 30); // live append
  cols.set(1.5, 1, 4); // a gap fill lands in the middle
  cols.set(2, 1, 6); // same timestamp: replaced, not duplicated
  assert.deepEqual(cols.data(), [[1, 1.5, 2, 3], [10, undefined, 20, 30], [undefined, 4, 6, undefined]]);
  cols.trimBefore(2);
  assert.deepEqual(cols.xs, [2, 3]);
});

test("a silence longer than three steps breaks the line", () => {
  const cols = new Columns();
  cols.load([{ key: "a", points: [[0, 1], [1, 1], [2, 1], [3, 1], [20, 1]], scale: 1 }]);
  assert.deepEqual(cols.xs, [0, 1, 2, 3, 4, 20]);
  assert.equal(cols.ys[0][4], null);
});

test("live events flatten to the keys the series API's replies get", () => {
  const [host] = recordsOf({ type: "host", host: 3, samples: [{ ts: 5, host: { cpu_pct: 1 },
    gpus: { 11: { util_pct: 4 } }, procs: [{ pid: 9, engine: 7, cpu_pct: 3, cpu_affinity: [0] }] }] });
  assert.deepEqual([...host.values.keys()], ["host.cpu_pct|host:3", "gpu.util_pct|gpu:11", "proc.cpu_pct|proc:3:9"]);
  assert.equal(entityKey({ kind: "proc", host: 3, pid: 9 }), "proc:3:9");
  const [engine] = recordsOf({ type: "engine", engine: 7, samples: [{ ts: 5, values: { up: 1 },
    quantiles: { ttft_seconds: { "0.5": 0.1, "0.99": 0.4 } } }] });
  assert.equal(engine.values.get(seriesKey("engine.ttft_seconds", 0.99, "engine:7")), 0.4);
});

test("a chart line takes its own entity, or every entity of its kind on a host", () => {
  const take = (line, key) => {
    const { metric, quantile, entity } = parseKey(key);
    return lineTakes(line, metric, quantile, entity);
  };
  assert.ok(take({ metric: "gpu.util_pct", entity: "11" }, "gpu.util_pct|gpu:11"));
  assert.ok(!take({ metric: "gpu.util_pct", entity: "11" }, "gpu.util_pct|gpu:12"));
  assert.ok(take({ metric: "gpu.util_pct", host: 3 }, "gpu.util_pct|gpu:12"));
  assert.ok(take({ metric: "engine.itl_seconds", entity: "7", quantile: 0.9 }, "engine.itl_seconds@0.9|engine:7"));
  assert.ok(!take({ metric: "engine.itl_seconds", entity: "7", quantile: 0.9 }, "engine.itl_seconds@0.99|engine:7"));
});

test("arrival latency is measured for every sample of every event type", () => {
  assert.deepEqual(sampleTimes({ type: "fleet", hosts: [{ ts: 1 }, { ts: 2 }] }), [1, 2]);
  assert.deepEqual(sampleTimes({ type: "engine", samples: [{ ts: 3 }] }), [3]);
});

test("the URL range round-trips, and a bad one falls back to live", () => {
  assert.deepEqual(rangeFromSearch("?range=7d"), { name: "7d" });
  assert.deepEqual(rangeFromSearch("?range=2y"), { name: "live" });
  assert.deepEqual(rangeFromSearch("?from=100&to=50"), { name: "live" });
  const custom = rangeFromSearch("?from=1000&to=2000");
  assert.equal(searchOf(custom), "?from=1000&to=2000");
  assert.deepEqual(windowOf(custom), [1000, 2000]);
  assert.deepEqual(windowOf({ name: "1h" }, 10000), [6400, 10000]);
});

test("units scale to what an operator reads", () => {
  assert.equal(withUnit(80 * 2 ** 30 * axisFor("bytes").scale, axisFor("bytes")), "80 GiB");
  assert.equal(withUnit(0.0123 * axisFor("s").scale, axisFor("s")), "12.3 ms");
  assert.equal(withUnit(0.42 * axisFor("ratio").scale, axisFor("ratio")), "42%");
  assert.equal(formatCell("gib", 60 * 2 ** 30), "60.0 GiB");
  assert.equal(formatCell("ratio", 0.42), "42%");
  assert.equal(formatCell("pct", null), "–");
});

test("axis ticks carry the decimals their spacing needs", () => {
  assert.deepEqual(ticks([0, 0.25, 0.5], 0.25), ["0", "0.25", "0.50"]);
  assert.deepEqual(ticks([0, 5, 10], 5), ["0", "5", "10"]);
  assert.deepEqual(ticks([0, 5000, 10000, 15000], 5000), ["0", "5k", "10k", "15k"]);
  assert.deepEqual(ticks([10000, 12500], 2500), ["10.0k", "12.5k"]);
  const t = new Date(2026, 2, 2, 14, 3, 5).getTime() / 1000;
  assert.equal(timeTick(t, 10), "14:03:05");
  assert.equal(timeTick(t, 300), "14:03");
  assert.equal(timeTick(t, 86400), "Mar 2");
});
