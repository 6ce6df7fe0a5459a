// Canvas heatmaps: rows x time, one colour per cell. CpuHeatmap draws host.cpu_core_pct
// (a row per core; reads at 64+ cores where 64 lines would not), Timeline draws a bitmask
// metric as a row per bit (GPU throttle reasons). Same interface as LineChart for the page.

import { axisFor, fullTime, timeTick } from "./units.js";
import { lowerBound, typicalStep } from "./timeseries.js";
import { lineTakes, parseKey } from "./series.js";
import { cssColour, onThemeChange, rgb } from "./theme.js";

// Left gutter for row labels: the CPU map lines up with the uPlot charts' plot area.
const GUTTER_CPU = 66;
const GUTTER_REASONS = 112;
const GUTTER_B = 18;
const GUTTER_T = 6; // room for the first row's label
// No sample, and an inactive reason: pitwall.css's --chart-empty and --chart-off (light, dark).
const EMPTY = [244, 246, 248];
const OFF = [226, 232, 240];

// viridis at 0, 25, 50, 75, 100 %: perceptually even, readable for colour-blind operators.
const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];

function ramp(stops, v) {
  const x = Math.max(0, Math.min(1, v / 100)) * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(x));
  const f = x - i;
  return stops[i].map((c, k) => Math.round(c + (stops[i + 1][k] - c) * f));
}

class Heatmap {
  constructor(fig, { window, onZoom }) {
    this.fig = fig;
    this.plotEl = fig.querySelector(".plot");
    this.lines = JSON.parse(fig.dataset.lines);
    this.axis = axisFor(fig.dataset.unit);
    this.window = window;
    this.onZoom = onZoom;
    this.gutter = GUTTER_CPU;
    this.xs = [];
    this.vals = [];
    this.step = null;
    this.canvas = null;
    new ResizeObserver(() => this.canvas && this.draw()).observe(this.plotEl);
    onThemeChange(() => {
      this._lut = null; // the colours of the cells
      if (this.canvas) this.draw();
    });
  }

  plotWidth() {
    return Math.max(200, (this.plotEl.clientWidth || 600) - this.gutter);
  }

  takesKey(key) {
    const { metric, quantile, entity } = parseKey(key);
    return this.lines.some((l) => lineTakes(l, metric, quantile, entity));
  }

  load(series) {
    const s = series[0] || { points: [] };
    this.xs = s.points.map((p) => p[0]);
    this.vals = s.points.map((p) => p[1]);
    this.step = typicalStep(s.points, s.step);
    this.draw();
  }

  merge(series) {
    for (const s of series) for (const [ts, v] of s.points) this.put(ts, v);
    this.draw();
  }

  take(record) {
    let changed = false;
    for (const [key, v] of record.values) {
      if (v == null || !this.takesKey(key)) continue;
      this.put(record.ts, v);
      changed = true;
    }
    return changed;
  }

  put(ts, v) {
    const i = lowerBound(this.xs, ts);
    if (this.xs[i] === ts) this.vals[i] = v;
    else {
      this.xs.splice(i, 0, ts);
      this.vals.splice(i, 0, v);
    }
    if (!this.step && this.xs.length > 2) this.step = typicalStep(this.xs.map((x) => [x]), null);
  }

  trimBefore(ts) {
    const n = lowerBound(this.xs, ts);
    this.xs.splice(0, n);
    this.vals.splice(0, n);
  }

  lastTs() {
    return this.xs.length ? this.xs[this.xs.length - 1] : null;
  }

  redraw() {
    this.draw();
  }

  showError(message) {
    this.plotEl.dataset.state = "error";
    this.plotEl.innerHTML = "";
    const p = document.createElement("p");
    p.className = "note";
    p.textContent = message;
    this.plotEl.append(p);
    this.canvas = null;
  }

  ensureCanvas() {
    if (this.canvas) return;
    this.plotEl.innerHTML = "";
    this.canvas = document.createElement("canvas");
    this.tip = document.createElement("div");
    this.tip.className = "heat-tip";
    this.tip.hidden = true;
    this.sel = document.createElement("div");
    this.sel.className = "heat-select";
    this.plotEl.append(this.canvas, this.tip, this.sel);
    this.bindPointer();
  }

  // Pixel rendering: every device pixel looks up its time column and row; fast at 128 cores.
  draw() {
    this.ensureCanvas();
    const rows = this.rowCount();
    const rowPx = this.rowHeight(rows);
    const w = this.plotWidth();
    const h = Math.max(rowPx * Math.max(rows, 1), 40);
    const dpr = window.devicePixelRatio || 1;
    this.size = { w, h, rows, rowPx };
    this.canvas.width = Math.round((w + this.gutter) * dpr);
    this.canvas.height = Math.round((h + GUTTER_T + GUTTER_B) * dpr);
    this.canvas.style.width = `${w + this.gutter}px`;
    this.canvas.style.height = `${h + GUTTER_T + GUTTER_B}px`;
    const ctx = this.canvas.getContext("2d");
    const pw = Math.round(w * dpr);
    const ph = Math.round(h * dpr);
    const img = ctx.createImageData(pw, ph);
    this.paint(new Uint32Array(img.data.buffer), pw, ph, rows);
    ctx.putImageData(img, Math.round(this.gutter * dpr), Math.round(GUTTER_T * dpr));
    ctx.scale(dpr, dpr);
    this.labelAxes(ctx, w, h, rows, rowPx);
    this.plotEl.dataset.state = "drawn";
    this.plotEl.dataset.rows = String(rows);
    this.plotEl.dataset.columns = String(this.xs.length);
  }

  paint(pixels, pw, ph, rows) {
    const [from, to] = this.window();
    const lut = this.lut();
    const empty = pack(rgb(cssColour("chart-empty"), EMPTY));
    const span = to - from;
    // A column is drawn up to 1.5 steps (or one pixel) past its sample; beyond: a gap.
    const reach = Math.max((this.step || 1) * 1.5, span / pw);
    let j = -1;
    for (let px = 0; px < pw; px++) {
      const t = from + ((px + 0.5) / pw) * span;
      while (j + 1 < this.xs.length && this.xs[j + 1] <= t) j++;
      const sample = j >= 0 && t - this.xs[j] <= reach ? this.vals[j] : null;
      for (let py = 0; py < ph; py++) {
        const row = Math.floor((py / ph) * rows);
        const v = sample == null ? null : this.valueAt(sample, row);
        pixels[py * pw + px] = v == null ? empty : lut[Math.max(0, Math.min(100, Math.round(v)))];
      }
    }
  }

  lut() {
    if (!this._lut) {
      this.off = null;
      this._lut = Array.from({ length: 101 }, (_, v) => pack(this.colour(v)));
    }
    return this._lut;
  }

  labelAxes(ctx, w, h, rows, rowPx) {
    ctx.fillStyle = cssColour("chart-axis", "#5b6470");
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    ctx.textAlign = "right";
    const every = Math.max(1, Math.ceil(11 / rowPx));
    for (let r = 0; r < rows; r += every) ctx.fillText(this.rowLabel(r), this.gutter - 6, GUTTER_T + r * rowPx + rowPx / 2);
    const [from, to] = this.window();
    ctx.textBaseline = "top";
    ctx.textAlign = "center";
    const incr = niceStep((to - from) / Math.max(2, Math.floor(w / 110)));
    for (let t = Math.ceil(from / incr) * incr; t <= to; t += incr) {
      const x = ((t - from) / (to - from)) * w;
      if (x > 24 && x < w - 24) ctx.fillText(timeTick(t, incr), this.gutter + x, GUTTER_T + h + 4);
    }
  }

  bindPointer() {
    const c = this.canvas;
    const at = (ev) => {
      const r = c.getBoundingClientRect();
      const x = ev.clientX - r.left - this.gutter;
      const y = ev.clientY - r.top - GUTTER_T;
      const [from, to] = this.window();
      return { x, y, t: from + (x / this.size.w) * (to - from), inside: x >= 0 && x < this.size.w && y >= 0 && y < this.size.h };
    };
    let start = null;
    c.addEventListener("mousedown", (ev) => { const p = at(ev); if (p.inside) start = p; });
    addEventListener("mouseup", (ev) => {
      if (!start) return;
      const end = at(ev);
      this.sel.hidden = true;
      if (Math.abs(end.x - start.x) >= 4) this.onZoom(Math.min(start.t, end.t), Math.max(start.t, end.t));
      start = null;
    });
    c.addEventListener("mousemove", (ev) => {
      const p = at(ev);
      this.hover(p, ev);
      if (start) {
        Object.assign(this.sel.style, { top: `${GUTTER_T}px`, left: `${this.gutter + Math.min(start.x, p.x)}px`, width: `${Math.abs(p.x - start.x)}px`, height: `${this.size.h}px` });
        this.sel.hidden = false;
      }
    });
    c.addEventListener("mouseleave", () => { this.tip.hidden = true; });
  }

  hover(p, ev) {
    if (!p.inside) { this.tip.hidden = true; return; }
    const j = lowerBound(this.xs, p.t + 1e-9) - 1;
    const row = Math.floor(p.y / this.size.rowPx);
    const v = j >= 0 && row < this.size.rows ? this.valueAt(this.vals[j], row) : null;
    this.tip.textContent = `${this.rowLabel(row)} · ${j >= 0 ? fullTime(this.xs[j]) : "–"} · ${this.describe(v, j >= 0 ? this.vals[j] : null)}`;
    this.tip.style.left = `${ev.offsetX + 12}px`;
    this.tip.style.top = `${ev.offsetY + 12}px`;
    this.tip.hidden = false;
  }
}

// A tick spacing of whole seconds, minutes, hours or days near `raw` seconds.
const STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800];
function niceStep(raw) {
  return STEPS.find((s) => s >= raw) || Math.ceil(raw / 604800) * 604800;
}

function pack([r, g, b]) {
  return (255 << 24) | (b << 16) | (g << 8) | r; // little-endian RGBA in a Uint32Array
}

export class CpuHeatmap extends Heatmap {
  rowCount() {
    return this.vals.reduce((m, v) => Math.max(m, Array.isArray(v) ? v.length : 0), 0);
  }

  rowHeight(rows) {
    return Math.max(2, Math.min(14, Math.floor(320 / Math.max(rows, 1))));
  }

  valueAt(sample, row) {
    return Array.isArray(sample) ? sample[row] ?? null : null;
  }

  colour(v) {
    return ramp(VIRIDIS, v);
  }

  rowLabel(row) {
    return `core ${row}`;
  }

  describe(v) {
    return v == null ? "no sample" : `${Math.round(v)}% busy`;
  }
}

export class Timeline extends Heatmap {
  // reasons: [{bit, name, severe}] from the page config (controlplane/web/nvml.py).
  constructor(fig, opts) {
    super(fig, opts);
    this.reasons = opts.reasons;
    this.gutter = GUTTER_REASONS;
  }

  rowCount() {
    return this.reasons.length;
  }

  rowHeight() {
    return 14;
  }

  valueAt(mask, row) {
    if (mask == null) return null;
    const r = this.reasons[row];
    return mask & r.bit ? (r.severe ? 100 : 50) : 0;
  }

  colour(v) {
    if (v < 50) return this.off || (this.off = rgb(cssColour("chart-off"), OFF));
    return v >= 100 ? [220, 38, 38] : [234, 179, 8];
  }

  rowLabel(row) {
    return this.reasons[row]?.name ?? "";
  }

  describe(v, mask) {
    return mask == null ? "no sample" : v ? "active" : "inactive";
  }
}
