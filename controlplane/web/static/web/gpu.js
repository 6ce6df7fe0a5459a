// GPU page: every gpu.* chart (page.js); its samples arrive in its host's events.

import { ChartPage } from "./page.js";
import { fillFields, markSeen, pageConfig } from "./dom.js";

const head = document.querySelector(".page-head");
const gpuId = head.dataset.gpuId;
const reasons = pageConfig().throttle_reasons;

function onLive(msg) {
  const last = msg.type === "host" ? msg.samples?.at(-1) : null;
  const values = last?.gpus?.[gpuId];
  if (!values) return;
  markSeen(head);
  fillFields(document.querySelectorAll(".facts [data-field]"), values, reasons);
}

new ChartPage({ onLive }).start();
