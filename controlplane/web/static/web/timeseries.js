// Column store for one chart: shared x (unix s) and one y array per series key, kept sorted,
// merged from history (join) and from live records (insert), trimmed to a window.

export class Columns {
  constructor() {
    this.keys = [];
    this.xs = [];
    this.ys = [];
  }

  // Replaces everything by these series ({key, points, scale}); gaps become nulls.
  load(series) {
    const byTs = new Map();
    this.keys = series.map((s) => s.key);
    series.forEach((s, i) => {
      for (const [ts, v] of withGaps(s.points, s.step)) {
        let row = byTs.get(ts);
        if (!row) byTs.set(ts, (row = new Array(series.length).fill(undefined)));
        row[i] = v == null ? null : v * s.scale;
      }
    });
    this.xs = [...byTs.keys()].sort((a, b) => a - b);
    this.ys = this.keys.map((_, i) => this.xs.map((ts) => byTs.get(ts)[i]));
  }

  addKey(key) {
    this.keys.push(key);
    this.ys.push(new Array(this.xs.length).fill(undefined));
    return this.keys.length - 1;
  }

  // Puts a point at ts (appends when newest, the common case of a live push).
  set(ts, index, value) {
    const n = this.xs.length;
    const i = n === 0 || this.xs[n - 1] < ts ? n : lowerBound(this.xs, ts);
    if (this.xs[i] !== ts) {
      this.xs.splice(i, 0, ts);
      for (const y of this.ys) y.splice(i, 0, undefined);
    }
    this.ys[index][i] = value;
  }

  trimBefore(ts) {
    const n = lowerBound(this.xs, ts);
    if (n > 0) {
      this.xs.splice(0, n);
      for (const y of this.ys) y.splice(0, n);
    }
  }

  lastTs() {
    return this.xs.length ? this.xs[this.xs.length - 1] : null;
  }

  data() {
    return [this.xs, ...this.ys];
  }
}

export function lowerBound(xs, ts) {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (xs[mid] < ts) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// The typical spacing of points: the reply's bucket width, else the median difference.
export function typicalStep(points, step) {
  if (step) return step;
  if (points.length < 3) return null;
  const diffs = [];
  for (let i = 1; i < points.length; i++) diffs.push(points[i][0] - points[i - 1][0]);
  diffs.sort((a, b) => a - b);
  return diffs[diffs.length >> 1];
}

// A silence longer than three steps is drawn as a break in the line, not a straight bridge.
function withGaps(points, step) {
  const typical = typicalStep(points, step);
  if (!typical) return points;
  const out = [];
  for (let i = 0; i < points.length; i++) {
    if (i > 0 && points[i][0] - points[i - 1][0] > 3 * typical) out.push([points[i - 1][0] + typical, null]);
    out.push(points[i]);
  }
  return out;
}
