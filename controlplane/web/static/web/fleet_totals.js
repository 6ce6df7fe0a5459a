// Fleet page: the totals strip over the hosts online now. GPUs busy, tokens/s and requests
// waiting follow the "fleet" events (they carry each GPU's utilisation and each engine's
// waiting requests and tokens/s); alerts firing is the page load's: the events do not carry it.

import { formatCell } from "./units.js";

export class FleetTotals {
  // rows: host id -> its <tr>, whose data-state and data-waiting fleet.js keeps current.
  constructor(rows, { busy_util_pct: threshold, busy_by_host: busyByHost, tokens_by_host: tokensByHost }) {
    this.rows = rows;
    this.threshold = threshold;
    this.busy = byHost(busyByHost);
    this.tokens = byHost(tokensByHost);
    this.gpus = new Map([...rows].map(([id, tr]) => [id, tr.querySelectorAll(".gpu[data-gpu-id]").length]));
    this.cells = new Map([...document.querySelectorAll("#fleet-totals [data-total]")].map((el) => [el.dataset.total, el]));
  }

  // One host of a fleet event: its GPUs at the threshold or above, from its newest sample.
  take(host) {
    const utils = (host.gpus || []).map((g) => g.util_pct).filter((v) => v != null);
    if (utils.length) this.busy.set(host.id, utils.filter((u) => u >= this.threshold).length);
    const tokens = (host.engines || []).map((e) => e.generation_tokens_per_s).filter((v) => v != null);
    if (tokens.length) this.tokens.set(host.id, tokens.reduce((a, b) => a + b, 0));
  }

  render() {
    let gpus = 0;
    let busy = 0;
    let waiting = null;
    let tokens = null;
    for (const [id, tr] of this.rows) {
      if (tr.dataset.state !== "online") continue;
      gpus += this.gpus.get(id) || 0;
      busy += this.busy.get(id) || 0;
      if (this.tokens.has(id)) tokens = (tokens || 0) + this.tokens.get(id);
      if (tr.dataset.waiting !== "" && tr.dataset.waiting != null) waiting = (waiting || 0) + Number(tr.dataset.waiting);
    }
    this.show("gpus", String(gpus));
    this.show("gpus_busy", String(busy));
    this.show("requests_waiting", formatCell("num", waiting));
    this.show("generation_tokens_per_s", formatCell("num", tokens));
  }

  show(name, text) {
    const cell = this.cells.get(name);
    if (cell && cell.textContent !== text) cell.textContent = text;
  }
}

// host id (a JSON key) -> figure
function byHost(figures) {
  return new Map(Object.entries(figures || {}).map(([id, n]) => [Number(id), n]));
}
