// Small DOM helpers shared by the pages: page config, live cell updates, online/offline state.

import { ago, formatCell } from "./units.js";

export function pageConfig() {
  return JSON.parse(document.getElementById("page-config").textContent);
}

// Server clock: "last seen" times are server timestamps, compared with the server's now as the
// browser estimates it (its own clock may be off by seconds).
let skew = 0;
export function syncClock(serverNow) {
  skew = serverNow - Date.now() / 1000;
}
export const serverNow = () => Date.now() / 1000 + skew;

// Cells of `scope` with data-field=<key> present in values get its formatted value.
export function fillFields(cells, values, reasons) {
  for (const cell of cells) {
    const key = cell.dataset.field;
    if (!(key in values)) continue;
    const v = values[key];
    cell.dataset.value = v;
    if (cell.dataset.fmt === "reasons") renderReasons(cell, v, reasons);
    else cell.textContent = formatCell(cell.dataset.fmt, v);
  }
}

export function ownCells(container) {
  return [...container.querySelectorAll("[data-field]")].filter(
    (cell) => cell.closest("[data-gpu-id], [data-engine-id], [data-pid], [data-host-id]") === container,
  );
}

export function setBar(bar, used, total) {
  const i = bar?.querySelector("i");
  if (!i || used == null || !total) return;
  i.style.width = `${Math.max(0, Math.min(100, (100 * used) / total)).toFixed(1)}%`;
}

export function renderReasons(cell, mask, reasons) {
  const active = reasons.filter((r) => mask & r.bit);
  cell.replaceChildren(...(active.length ? active.map((r) => chip(r.name, r.severe ? "warn" : "")) : [muted("none")]));
}

function chip(text, extra) {
  const s = document.createElement("span");
  s.className = `chip ${extra}`.trim();
  s.textContent = text;
  return s;
}

function muted(text) {
  const s = document.createElement("span");
  s.className = "muted";
  s.textContent = text;
  return s;
}

// Online until `window` seconds pass without a report: flips data-state and the badge, and
// keeps "N s ago" current. Elements carry data-last-seen (server unix s).
export function tickFreshness(elements, windowS) {
  const now = serverNow();
  for (const el of elements) {
    const seen = el.dataset.lastSeen ? Number(el.dataset.lastSeen) : null;
    const state = seen != null && now - seen <= windowS ? "online" : "offline";
    const agoCell = el.querySelector("[data-field=last_seen]") || document.querySelector(".facts [data-field=last_seen]");
    if (agoCell && seen != null) agoCell.textContent = ago(now - seen);
    if (el.dataset.state === state && el.dataset.stateKnown) continue;
    el.dataset.state = state;
    el.dataset.stateKnown = "1";
    const badge = el.querySelector("[data-state-badge]");
    if (badge) {
      badge.textContent = state;
      badge.className = `badge ${state}`;
    }
  }
}

export function markSeen(el) {
  el.dataset.lastSeen = serverNow().toFixed(3);
}
