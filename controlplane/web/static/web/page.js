// The controller of a chart page (host, engine, GPU): builds the charts declared in the DOM,
// loads their history for the range in the URL, appends live points in the live range, fills
// the gap after a reconnect, and turns the picker and drag-to-zoom into URL changes.

import { LineChart } from "./chart.js";
import { CpuHeatmap, Timeline } from "./heatmap.js";
import { recordsOf } from "./events.js";
import { LiveSocket } from "./live.js";
import { bindPicker, isLive, nowS, pushRange, rangeFromSearch, windowOf } from "./range.js";
import { fetchLine } from "./series.js";
import { pageConfig, syncClock, tickFreshness } from "./dom.js";

const KINDS = { line: LineChart, heatmap: CpuHeatmap, timeline: Timeline };

export class ChartPage {
  // onLive(msg) updates the page's "now" tables; it runs in every range.
  constructor({ onLive = () => {} } = {}) {
    this.cfg = pageConfig();
    syncClock(this.cfg.server_now);
    this.range = rangeFromSearch(location.search);
    this.onLive = onLive;
    this.loading = null;
    const opts = {
      window: () => this.window(),
      onZoom: (from, to) => this.setRange({ name: "custom", from, to }),
      labels: new Map(Object.entries(this.cfg.labels || {})),
      reasons: this.cfg.throttle_reasons,
    };
    this.charts = [...document.querySelectorAll("figure[data-chart]")].map(
      (fig) => new KINDS[fig.dataset.kind](fig, opts),
    );
    this.picker = bindPicker(document.getElementById("range-picker"), (r) => this.setRange(r));
    addEventListener("popstate", () => this.setRange(rangeFromSearch(location.search), false));
    window.pitwall = this; // for browser tests and debugging: the page, its charts and socket
  }

  // The window charts show: in the live range it slides with the clock.
  window() {
    return this.frozen ?? windowOf(this.range, nowS());
  }

  async start() {
    this.picker.show(this.range);
    document.body.dataset.range = this.range.name;
    // The socket opens while history loads; its events wait for the load (see live()).
    this.socket = new LiveSocket({
      path: this.cfg.ws_path,
      groups: this.cfg.groups,
      onEvent: (msg) => this.live(msg),
      onResume: () => this.fillGap(),
    }).start();
    await this.load();
    document.body.dataset.ready = "1";
    setInterval(() => this.tick(), 1000);
  }

  setRange(range, push = true) {
    const same = (a, b) => a.name === b.name && a.from === b.from && a.to === b.to;
    if (push && same(range, this.range) && range.name === "custom") return;
    this.range = range;
    if (push) pushRange(range);
    this.picker.show(range);
    document.body.dataset.range = range.name;
    this.load();
  }

  // History for every chart over the whole window, each line one request in parallel.
  async load() {
    this.loading?.abort();
    const ctrl = (this.loading = new AbortController());
    const [start, end] = windowOf(this.range, nowS());
    this.frozen = isLive(this.range) ? null : [start, end];
    this.pending = [];
    await Promise.all(this.charts.map((c) => this.fetchInto(c, start, end, ctrl.signal, "load")));
    if (ctrl.signal.aborted) return;
    const pending = this.pending;
    this.pending = null;
    for (const msg of pending) this.append(msg);
  }

  async fetchInto(chart, start, end, signal, how) {
    try {
      const parts = await Promise.all(
        chart.lines.map((l) => fetchLine(this.cfg.series_url, l, start, end, chart.plotWidth(), signal)),
      );
      if (!signal.aborted) chart[how](parts.flat());
    } catch (err) {
      if (err.name !== "AbortError") chart.showError(String(err.message || err));
    }
  }

  live(msg) {
    this.onLive(msg);
    if (!isLive(this.range)) return; // history ranges never move
    // While history loads, points wait: a load replaces what the charts hold.
    if (this.pending) this.pending.push(msg);
    else this.append(msg);
  }

  append(msg) {
    const records = recordsOf(msg);
    for (const chart of this.charts) {
      let changed = false;
      for (const record of records) changed = chart.take(record) || changed;
      if (changed) chart.redraw();
    }
  }

  // After a reconnect: what was pushed while the socket was down, from the series API.
  fillGap() {
    if (!isLive(this.range)) return;
    const end = nowS();
    const [windowStart] = this.window();
    const signal = (this.loading = new AbortController()).signal;
    for (const chart of this.charts) {
      const start = Math.max(windowStart, chart.lastTs() ?? windowStart);
      this.fetchInto(chart, start, end, signal, "merge");
    }
  }

  tick() {
    tickFreshness(document.querySelectorAll(".page-head[data-last-seen]"), this.cfg.online_window_s);
    if (!isLive(this.range)) return;
    const [start] = this.window();
    for (const chart of this.charts) {
      chart.trimBefore(start);
      chart.redraw();
    }
  }
}
