// A uPlot line chart for one <figure data-chart>: units on the y axis, hover read-outs in the
// legend, cursor synced across the page, and drag-to-zoom handed to the page (onZoom).

import uPlot from "uplot";
import { axisFor, fullTime, ticks, timeTick, withUnit } from "./units.js";
import { Columns } from "./timeseries.js";
import { keyLabel, lineTakes, parseKey } from "./series.js";
import { cssColour, cssList, onThemeChange } from "./theme.js";

// Colours come from pitwall.css (--chart-*), light or dark as the system prefers; these are
// the light ones, for a page without the stylesheet.
const PALETTE = ["#2563eb", "#16a34a", "#ea580c", "#9333ea", "#0891b2", "#ca8a04", "#db2777",
  "#4b5563", "#65a30d", "#dc2626", "#0d9488", "#7c3aed"];
const QUANTILE_COLOURS = { "0.5": ["chart-p50", "#16a34a"], "0.9": ["chart-p90", "#d97706"], "0.99": ["chart-p99", "#dc2626"] };
const REFERENCE = new Set(["total", "limit"]); // drawn dashed: a ceiling, not a measurement
const HEIGHT = 190;

function yRange(min, max, softMax) {
  if (min == null || max == null) return [0, softMax ?? 1];
  const lo = Math.min(0, min);
  if (softMax != null && max <= softMax) return [lo, softMax];
  const hi = max > lo ? max : lo + 1;
  return [lo, hi + (hi - lo) * 0.08];
}

export class LineChart {
  // labels: Map of entity key -> label for series that first appear live (page config).
  constructor(fig, { window, onZoom, labels }) {
    this.fig = fig;
    this.plotEl = fig.querySelector(".plot");
    this.lines = JSON.parse(fig.dataset.lines);
    this.axis = axisFor(fig.dataset.unit);
    this.window = window;
    this.onZoom = onZoom;
    this.entityLabels = labels;
    this.cols = new Columns();
    this.labels = [];
    this.route = new Map(); // series key -> column index, or -1 when no line takes it
    this.u = null;
    this.stale = true; // the uPlot instance must be rebuilt (series added)
    new ResizeObserver(() => this.resize()).observe(this.plotEl);
    onThemeChange(() => {
      this.stale = true;
      if (this.u) this.redraw();
    });
  }

  plotWidth() {
    return Math.max(200, this.plotEl.clientWidth || 600);
  }

  // History: replaces the data with these fetched series ({key, label, points, step}).
  load(series) {
    this.cols.load(series.map((s) => ({ ...s, scale: this.axis.scale })));
    this.labels = series.map((s) => s.label);
    this.route = new Map(series.map((s, i) => [s.key, i]));
    this.stale = true;
    this.redraw();
  }

  // A gap fill: points merged into what the chart holds.
  merge(series) {
    for (const s of series) {
      const i = this.columnFor(s.key, s.label);
      for (const [ts, v] of s.points) this.cols.set(ts, i, v == null ? null : v * this.axis.scale);
    }
    this.redraw();
  }

  // A live record: takes the values of its own lines; true when something changed.
  take(record) {
    let changed = false;
    for (const [key, v] of record.values) {
      const i = this.columnFor(key);
      if (i < 0 || typeof v !== "number") continue;
      this.cols.set(record.ts, i, v * this.axis.scale);
      changed = true;
    }
    return changed;
  }

  columnFor(key, label) {
    let i = this.route.get(key);
    if (i !== undefined) return i;
    const { metric, quantile, entity } = parseKey(key);
    const line = this.lines.find((l) => lineTakes(l, metric, quantile, entity));
    i = line ? this.cols.addKey(key) : -1;
    if (line) {
      this.labels.push(label || line.label || this.entityLabels.get(entity) || keyLabel(entity));
      this.stale = true;
    }
    this.route.set(key, i);
    return i;
  }

  trimBefore(ts) {
    this.cols.trimBefore(ts);
  }

  lastTs() {
    return this.cols.lastTs();
  }

  redraw() {
    if (this.stale) return this.rebuild();
    this.u.setData(this.cols.data());
    this.showLatest(this.u);
    this.note(this.cols.xs.length ? "" : "No data in this range");
  }

  // Away from the cursor, the legend reads the newest values: a live read-out.
  showLatest(u) {
    if (u.cursor.idx != null || !this.cols.xs.length) return;
    u.setLegend({ idx: this.cols.xs.length - 1 });
  }

  showError(message) {
    this.plotEl.dataset.state = "error";
    this.note(message);
  }

  note(text) {
    let p = this.plotEl.querySelector(".note");
    if (!p) {
      p = document.createElement("p");
      p.className = "note";
      this.plotEl.append(p);
    }
    p.textContent = text;
    p.hidden = !text;
  }

  rebuild() {
    this.u?.destroy();
    this.plotEl.querySelector(".note")?.remove();
    this.u = new uPlot(this.options(), this.cols.data(), this.plotEl);
    this.showLatest(this.u);
    this.stale = false;
    this.plotEl.dataset.state = "drawn";
    this.plotEl.dataset.series = String(this.cols.keys.length);
    this.note(this.cols.xs.length ? "" : "No data in this range");
  }

  seriesOptions(key, i) {
    const { quantile } = parseKey(key);
    const label = this.labels[i];
    const reference = REFERENCE.has(label);
    const palette = cssList("chart-series", PALETTE);
    const q = QUANTILE_COLOURS[quantile];
    return {
      label,
      stroke: q ? cssColour(...q) : reference ? cssColour("chart-reference", "#8a94a3") : palette[i % palette.length],
      dash: reference ? [5, 4] : undefined,
      width: 1.5,
      value: (u, v) => withUnit(v, this.axis),
    };
  }

  options() {
    const grid = { stroke: cssColour("chart-grid", "#e7eaee"), width: 1 };
    const stroke = cssColour("chart-axis", "#5b6470");
    return {
      width: this.plotWidth(),
      height: HEIGHT,
      cursor: {
        drag: { x: true, y: false, setScale: false },
        // Hover syncs across the page's charts; a drag does not, so one drag is one zoom.
        sync: { key: "pitwall", filters: { sub: (type) => type !== "mousedown" && type !== "mouseup" } },
      },
      select: { show: true },
      scales: {
        x: { time: true, range: () => this.window() },
        y: { range: (u, min, max) => yRange(min, max, this.axis.max) },
      },
      axes: [
        { grid, ticks: grid, stroke, size: 30,
          values: (u, splits, ai, space, incr) => splits.map((ts) => timeTick(ts, incr)) },
        { grid, ticks: grid, stroke, label: this.axis.label, labelSize: 14, size: 52,
          values: (u, splits, ai, space, incr) => ticks(splits, incr) },
      ],
      series: [{ label: "time", value: (u, ts) => fullTime(ts) }, ...this.cols.keys.map((k, i) => this.seriesOptions(k, i))],
      hooks: {
        setSelect: [(u) => this.selected(u)],
        setCursor: [(u) => this.showLatest(u)],
      },
    };
  }

  selected(u) {
    const { left, width } = u.select;
    if (width < 4) return;
    const from = u.posToVal(left, "x");
    const to = u.posToVal(left + width, "x");
    u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
    this.onZoom(from, to);
  }

  resize() {
    if (this.u && Math.abs(this.u.width - this.plotWidth()) > 2) {
      this.u.setSize({ width: this.plotWidth(), height: HEIGHT });
    }
  }
}
