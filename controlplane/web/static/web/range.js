// The time range in the URL (docs/dashboard.md): ?range=live|1h|6h|24h|7d|30d or ?from=&to= (unix s).
// The server parses the same parameters (controlplane/web/ranges.py) to render the picker.

export const PRESETS = { live: 300, "1h": 3600, "6h": 21600, "24h": 86400, "7d": 604800, "30d": 2592000 };
const MAX_CUSTOM = PRESETS["30d"];

export const nowS = () => Date.now() / 1000;

// A range is {name, from, to}; from/to matter only for "custom", presets end at "now".
export function rangeFromSearch(search) {
  const q = new URLSearchParams(search);
  const from = Number(q.get("from"));
  const to = Number(q.get("to"));
  if (q.has("from") && q.has("to") && from > 0 && to > from) {
    return { name: "custom", from: Math.max(from, to - MAX_CUSTOM), to };
  }
  const name = q.get("range");
  return { name: name in PRESETS ? name : "live" };
}

export const isLive = (range) => range.name === "live";

// [start, end] in unix seconds for the range as of now.
export function windowOf(range, now = nowS()) {
  if (range.name === "custom") return [range.from, range.to];
  return [now - PRESETS[range.name], now];
}

export function searchOf(range) {
  if (range.name === "custom") return `?from=${Math.floor(range.from)}&to=${Math.ceil(range.to)}`;
  return `?range=${range.name}`;
}

// Records the range in the URL (so a link shows the same view) without reloading the page.
export function pushRange(range) {
  const url = location.pathname + searchOf(range);
  if (url !== location.pathname + location.search) history.pushState({ range }, "", url);
}

// datetime-local inputs speak local time without a zone.
function toLocalInput(ts) {
  const d = new Date(ts * 1000 - new Date(ts * 1000).getTimezoneOffset() * 60000);
  return d.toISOString().slice(0, 19);
}

function fromLocalInput(text) {
  const t = new Date(text).getTime();
  return Number.isFinite(t) ? t / 1000 : null;
}

// Wires the picker: preset links and the custom form call onPick(range) instead of navigating.
export function bindPicker(el, onPick) {
  if (!el) return { show() {} };
  const form = el.querySelector("form.custom");
  el.addEventListener("click", (ev) => {
    const a = ev.target.closest("a[data-range]");
    if (!a || ev.metaKey || ev.ctrlKey || ev.shiftKey || ev.button !== 0) return;
    ev.preventDefault();
    onPick({ name: a.dataset.range });
  });
  form?.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const from = fromLocalInput(form.elements.from.value);
    const to = fromLocalInput(form.elements.to.value);
    if (from != null && to != null && to > from) onPick({ name: "custom", from, to });
  });
  const show = (range) => {
    el.dataset.range = range.name;
    for (const item of el.querySelectorAll("[data-range]")) {
      const on = item.dataset.range === range.name;
      item.classList.toggle("selected", on);
      if (on) item.setAttribute("aria-current", "true");
      else item.removeAttribute("aria-current");
    }
    const [from, to] = windowOf(range);
    el.dataset.from = Math.floor(from);
    el.dataset.to = Math.floor(to);
    if (form) {
      form.elements.from.value = toLocalInput(from);
      form.elements.to.value = toLocalInput(to);
    }
  };
  return { show };
}
