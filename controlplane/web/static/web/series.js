// Series keys and history from GET /api/v1/series/ (docs/history.md; session auth).
// A key names one line of one chart: "<metric>[@<quantile>]|<entity key>", the same key that
// live events are flattened into (events.js), so history and pushed points meet in one place.

export function entityKey(info) {
  if (info.kind === "proc") return `proc:${info.host}:${info.pid}`;
  return `${info.kind}:${info.id}`;
}

export function entityLabel(info) {
  switch (info.kind) {
    case "gpu": return `GPU ${info.index}`;
    case "engine": return info.name;
    case "proc": return `pid ${info.pid}`;
    default: return info.hostname ?? String(info.id);
  }
}

// A label for an entity known only by its key (a line that first appeared live).
export function keyLabel(entity) {
  const [kind, a, b] = entity.split(":");
  return kind === "proc" ? `pid ${b}` : `${kind} ${a}`;
}

export const quantileText = (q) => (q == null ? "" : String(Number(q)));

export function seriesKey(metric, quantile, entity) {
  const q = quantileText(quantile);
  return `${metric}${q ? "@" + q : ""}|${entity}`;
}

const kindOf = (metric) => metric.split(".", 1)[0];

// Does a line of a chart (charts.py Line) take the series with this key?
export function lineTakes(line, metric, quantile, entity) {
  if (line.metric !== metric || quantileText(line.quantile) !== quantileText(quantile)) return false;
  if (line.host != null) return entity.startsWith(kindOf(metric) + ":");
  return entity === `${kindOf(metric)}:${line.entity}`;
}

export function parseKey(key) {
  const [head, entity] = key.split("|");
  const [metric, quantile] = head.split("@");
  return { metric, quantile: quantile ?? null, entity };
}

// One request for one line: every series it answers, as {key, label, points, step}.
export async function fetchLine(url, line, start, end, maxPoints, signal) {
  const params = new URLSearchParams({
    metric: line.metric,
    start: start.toFixed(3),
    end: end.toFixed(3),
    max_points: String(Math.max(10, Math.min(10000, Math.round(maxPoints)))),
  });
  if (line.host != null) params.set("host", line.host);
  else params.set("entity", line.entity);
  if (line.quantile != null) params.set("quantile", line.quantile);
  if (line.stat) params.set("stat", line.stat);
  const resp = await fetch(`${url}?${params}`, {
    credentials: "same-origin", headers: { Accept: "application/json" }, signal,
  });
  if (!resp.ok) throw new Error(await errorText(resp));
  const reply = await resp.json();
  // The single-entity reply that preceded the multi-entity reply carried entity/points at the top.
  const list = reply.series ?? [{ entity: reply.entity, points: reply.points }];
  return list.map((s) => ({
    key: seriesKey(line.metric, line.quantile, entityKey(s.entity)),
    label: line.label || entityLabel(s.entity),
    points: s.points,
    step: reply.step ?? null,
  }));
}

async function errorText(resp) {
  try {
    const body = await resp.json();
    return Object.entries(body).map(([k, v]) => `${k}: ${[].concat(v).join(" ")}`).join("; ");
  } catch {
    return `HTTP ${resp.status}`;
  }
}
