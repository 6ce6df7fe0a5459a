// Host page: charts (page.js) plus the GPU and process tables, updated from each host event.

import { ChartPage } from "./page.js";
import { fillFields, markSeen, ownCells, pageConfig, setBar } from "./dom.js";

const head = document.querySelector(".page-head");
const reasons = pageConfig().throttle_reasons;

function updateGpus(gpus) {
  for (const row of document.querySelectorAll("#gpu-table tr[data-gpu-id]")) {
    const v = gpus[row.dataset.gpuId];
    if (!v) continue;
    fillFields(ownCells(row), v, reasons);
    const total = v.mem_total_bytes ?? Number(row.querySelector("[data-field=mem_total_bytes]")?.dataset.value);
    setBar(row.querySelector(".bar"), v.mem_used_bytes, total);
  }
}

function updateProcs(procs) {
  for (const p of procs) {
    const row = document.querySelector(`#proc-table tr[data-pid="${Number(p.pid)}"]`);
    if (row) fillFields(ownCells(row), p, reasons);
  }
}

function onLive(msg) {
  const last = msg.type === "host" ? msg.samples?.at(-1) : null;
  if (!last) return;
  markSeen(head);
  updateGpus(last.gpus || {});
  updateProcs(last.procs || []);
}

new ChartPage({ onLive }).start();
