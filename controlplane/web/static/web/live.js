// One WebSocket per page to /ws/live/ (docs/live.md): subscribes to the page's groups, pings
// every 20 s, reconnects with exponential backoff and full jitter, and shows its state in the
// #live-status indicator (data-state: connecting | live | reconnecting | offline).

import { sampleTimes } from "./events.js";

const PING_MS = 20000;
const BACKOFF_BASE_MS = 500;
const BACKOFF_MAX_MS = 30000;
const OFFLINE_AFTER = 4; // failed attempts in a row before the indicator says offline
const LATENCY_CAP = 100000;

// Arrival latency of every pushed sample (now - sample ts), read by the browser benchmark.
window.pitwallLiveLatencies = window.pitwallLiveLatencies || [];

function recordLatency(msg) {
  const now = Date.now() / 1000;
  const out = window.pitwallLiveLatencies;
  for (const ts of sampleTimes(msg)) if (typeof ts === "number") out.push(now - ts);
  if (out.length > LATENCY_CAP) out.splice(0, out.length - LATENCY_CAP / 2);
}

const LABELS = { connecting: "connecting…", live: "live", reconnecting: "reconnecting…", offline: "offline" };

export function showStatus(state, detail = "") {
  const el = document.getElementById("live-status");
  if (!el) return;
  el.dataset.state = state;
  el.querySelector(".label").textContent = LABELS[state] + (detail ? ` · ${detail}` : "");
  el.title = detail || LABELS[state];
}

export class LiveSocket {
  // onEvent(msg) for fleet/host/engine messages; onResume() after a reconnect (not the first).
  constructor({ path, groups, onEvent, onResume }) {
    Object.assign(this, { path, groups, onEvent, onResume });
    this.failures = 0;
    this.connectedOnce = false;
    this.ws = null;
    this.retry = null;
    this.pinger = null;
    addEventListener("online", () => this.reconnectNow());
    addEventListener("offline", () => showStatus("offline", "no network"));
  }

  start() {
    showStatus("connecting");
    this.connect();
    return this;
  }

  connect() {
    clearTimeout(this.retry);
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const ws = new WebSocket(`${scheme}//${location.host}${this.path}`);
    this.ws = ws;
    ws.onopen = () => ws.send(JSON.stringify({ type: "subscribe", groups: this.groups }));
    ws.onmessage = (ev) => this.receive(JSON.parse(ev.data));
    ws.onclose = (ev) => this.closed(ev);
  }

  receive(msg) {
    if (msg.type === "subscribed") {
      this.failures = 0;
      const denied = Object.keys(msg.denied || {});
      showStatus("live", denied.length ? `denied: ${denied.join(", ")}` : "");
      clearInterval(this.pinger);
      this.pinger = setInterval(() => this.send({ type: "ping" }), PING_MS);
      if (this.connectedOnce) this.onResume?.();
      this.connectedOnce = true;
      return;
    }
    if (msg.type === "pong") return;
    recordLatency(msg);
    this.onEvent(msg);
  }

  send(obj) {
    if (this.ws?.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(obj));
  }

  closed(ev) {
    clearInterval(this.pinger);
    this.failures += 1;
    const signedOut = ev.code === 4401;
    const forbidden = ev.code === 4403; // signed in without a role that reads the fleet
    const offline = signedOut || forbidden || !navigator.onLine || this.failures >= OFFLINE_AFTER;
    const why = signedOut ? "signed out" : forbidden ? "your role does not include live data" : "";
    showStatus(offline ? "offline" : "reconnecting", why);
    // Full jitter: a fleet of browsers reconnecting after a restart spreads out.
    const cap = Math.min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** (this.failures - 1));
    this.retry = setTimeout(() => this.connect(), cap / 2 + Math.random() * cap / 2);
  }

  reconnectNow() {
    if (this.ws && this.ws.readyState <= WebSocket.OPEN) return;
    this.connect();
  }
}
