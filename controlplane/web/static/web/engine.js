// Engine page: charts (page.js) plus the current figures, updated from each engine event.

import { ChartPage } from "./page.js";
import { fillFields, markSeen } from "./dom.js";

const head = document.querySelector(".page-head");

function onLive(msg) {
  const last = msg.type === "engine" ? msg.samples?.at(-1) : null;
  if (!last) return;
  markSeen(head);
  fillFields(document.querySelectorAll(".facts [data-field]"), last.values || {}, []);
}

new ChartPage({ onLive }).start();
