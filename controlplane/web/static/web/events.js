// Live events (docs/live.md) flattened into records {ts, values: Map<series key, value>} that
// charts take points from, whatever the event type.

import { seriesKey } from "./series.js";

function put(values, prefix, quantile, entity, object) {
  for (const [k, v] of Object.entries(object || {})) {
    if (typeof v === "number" || Array.isArray(v)) values.set(seriesKey(`${prefix}.${k}`, quantile, entity), v);
  }
}

function hostRecord(hostId, sample) {
  const values = new Map();
  put(values, "host", null, `host:${hostId}`, sample.host);
  for (const [gpuId, gpu] of Object.entries(sample.gpus || {})) put(values, "gpu", null, `gpu:${gpuId}`, gpu);
  for (const proc of sample.procs || []) {
    const { pid, engine, cpu_affinity, numa_nodes, ...metrics } = proc;
    put(values, "proc", null, `proc:${hostId}:${pid}`, metrics);
  }
  return { ts: sample.ts, values };
}

function engineRecord(engineId, sample) {
  const values = new Map();
  const entity = `engine:${engineId}`;
  put(values, "engine", null, entity, sample.values);
  for (const [name, byQ] of Object.entries(sample.quantiles || {})) {
    for (const [q, v] of Object.entries(byQ || {})) {
      if (typeof v === "number") values.set(seriesKey(`engine.${name}`, q, entity), v);
    }
  }
  return { ts: sample.ts, values };
}

export function recordsOf(msg) {
  if (msg.type === "host") return (msg.samples || []).map((s) => hostRecord(msg.host, s));
  if (msg.type === "engine") return (msg.samples || []).map((s) => engineRecord(msg.engine, s));
  return [];
}

// Sample timestamps in an event, for the arrival-latency record.
export function sampleTimes(msg) {
  if (msg.type === "fleet") return (msg.hosts || []).map((h) => h.ts);
  if (msg.type === "host" || msg.type === "engine") return (msg.samples || []).map((s) => s.ts);
  return [];
}
