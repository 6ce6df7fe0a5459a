// Fleet page: the host table, updated from the "fleet" group, filtered and sorted client-side
// (?q=&state=&sort= kept in the URL). A host that stops reporting turns offline after the
// online window without a reload: each row keeps the time of its last report (data-last-seen).

import { LiveSocket } from "./live.js";
import { fillFields, markSeen, ownCells, pageConfig, setBar, syncClock, tickFreshness } from "./dom.js";
import { FleetTotals } from "./fleet_totals.js";

const cfg = pageConfig();
syncClock(cfg.server_now);
const tbody = document.querySelector("#fleet-table tbody");
const rows = new Map([...tbody.querySelectorAll("tr[data-host-id]")].map((tr) => [Number(tr.dataset.hostId), tr]));
const totals = new FleetTotals(rows, cfg.totals || {});
const controls = {
  q: document.getElementById("fleet-filter"),
  state: document.getElementById("fleet-state"),
  sort: document.getElementById("fleet-sort"),
};

const num = (text) => (text === "" || text == null ? null : Number(text));
const mean = (xs) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);

// Highest first for the figures (the busiest host on top), alphabetical for names.
const SORTS = {
  name: (a, b) => a.dataset.hostname.localeCompare(b.dataset.hostname),
  gpu_util: byFigure("gpuUtil"),
  kv: byFigure("kv"),
  waiting: byFigure("waiting"),
};

function byFigure(field) {
  return (a, b) => {
    const x = num(a.dataset[field]);
    const y = num(b.dataset[field]);
    if (x === y) return SORTS.name(a, b);
    if (x == null) return 1;
    if (y == null) return -1;
    return y - x;
  };
}

function matches(tr, q, state) {
  if (q && !tr.dataset.hostname.toLowerCase().includes(q)) return false;
  if (state === "simulated") return tr.dataset.simulated === "1";
  return !state || tr.dataset.state === state;
}

let pending = false;
function arrange() {
  if (pending) return;
  pending = true;
  requestAnimationFrame(() => {
    pending = false;
    const q = controls.q.value.trim().toLowerCase();
    const state = controls.state.value;
    const sorted = [...rows.values()].sort(SORTS[controls.sort.value] || SORTS.name);
    let shown = 0;
    sorted.forEach((tr, i) => {
      tr.hidden = !matches(tr, q, state);
      shown += tr.hidden ? 0 : 1;
      if (tbody.children[i] !== tr) tbody.insertBefore(tr, tbody.children[i] || null);
    });
    document.getElementById("fleet-no-match").hidden = shown > 0 || rows.size === 0;
    summarise();
  });
}

function summarise() {
  const online = [...rows.values()].filter((tr) => tr.dataset.state === "online").length;
  document.querySelector("[data-count=online]").textContent = online;
  document.querySelector("[data-count=hosts]").textContent = rows.size;
}

function keepInUrl() {
  const q = new URLSearchParams();
  if (controls.q.value) q.set("q", controls.q.value);
  if (controls.state.value) q.set("state", controls.state.value);
  if (controls.sort.value !== "name") q.set("sort", controls.sort.value);
  history.replaceState(null, "", location.pathname + (q.size ? `?${q}` : ""));
}

function restoreFromUrl() {
  const q = new URLSearchParams(location.search);
  controls.q.value = q.get("q") || "";
  controls.state.value = q.get("state") || "";
  controls.sort.value = q.get("sort") && q.get("sort") in SORTS ? q.get("sort") : "name";
}

function updateHost(h) {
  const tr = rows.get(h.id);
  if (!tr) return false;
  markSeen(tr);
  fillFields(ownCells(tr), h, []);
  setBar(tr.querySelector("td.mem .bar"), h.mem_used_bytes, h.mem_total_bytes);
  for (const g of h.gpus || []) {
    const a = tr.querySelector(`.gpu[data-gpu-id="${g.id}"]`);
    if (!a) continue;
    fillFields(ownCells(a), g, []);
    setBar(a.querySelector(".bar"), g.mem_used_bytes, g.mem_total_bytes);
  }
  for (const e of h.engines || []) {
    const a = tr.querySelector(`.engine[data-engine-id="${e.id}"]`);
    if (!a) continue;
    fillFields(ownCells(a), e, []);
    setBar(a.querySelector(".bar"), e.kv_cache_usage, 1);
  }
  tr.dataset.gpuUtil = mean((h.gpus || []).map((g) => g.util_pct).filter((v) => v != null)) ?? "";
  tr.dataset.kv = Math.max(...(h.engines || []).map((e) => e.kv_cache_usage ?? -1), -1);
  if (tr.dataset.kv === "-1") tr.dataset.kv = "";
  const waits = (h.engines || []).map((e) => e.requests_waiting).filter((v) => v != null);
  tr.dataset.waiting = waits.length ? waits.reduce((a, b) => a + b, 0) : "";
  return true;
}

function onEvent(msg) {
  if (msg.type !== "fleet") return;
  let unknown = 0;
  for (const h of msg.hosts || []) {
    if (!updateHost(h)) unknown += 1;
    totals.take(h);
  }
  if (unknown) document.getElementById("fleet-new-hosts").hidden = false;
  tick();
}

function tick() {
  tickFreshness(rows.values(), cfg.online_window_s);
  arrange();
  totals.render();
}

restoreFromUrl();
for (const el of Object.values(controls)) {
  el.addEventListener("input", () => { keepInUrl(); arrange(); });
}
tick();
document.body.dataset.ready = "1";
// For browser tests and debugging: the socket.
window.pitwall = { socket: new LiveSocket({ path: cfg.ws_path, groups: cfg.groups, onEvent }).start() };
setInterval(tick, 1000);
