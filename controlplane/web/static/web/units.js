// Units: how each catalog unit is scaled and labelled on chart axes and read-outs, and the
// cell formats (data-fmt) the templates use, so that live updates match server rendering
// (controlplane/web/templatetags/web_tags.py).

const GiB = 2 ** 30;
const MiB = 2 ** 20;
export const DASH = "–";

// Catalog unit -> what the chart shows: values are multiplied by `scale` when they enter a
// chart, so ticks fall on round numbers of the displayed unit.
const AXES = {
  "%": { label: "%", scale: 1, max: 100 },
  ratio: { label: "%", scale: 100, max: 100 },
  bytes: { label: "GiB", scale: 1 / GiB },
  "bytes/s": { label: "MiB/s", scale: 1 / MiB },
  s: { label: "ms", scale: 1000 },
  "°C": { label: "°C", scale: 1 },
  W: { label: "W", scale: 1 },
  MHz: { label: "MHz", scale: 1 },
  "tokens/s": { label: "tokens/s", scale: 1 },
  "1/s": { label: "/s", scale: 1 },
};

export function axisFor(unit) {
  return AXES[unit] || { label: unit === "count" || unit === "bool" ? "" : unit, scale: 1 };
}

// A compact number: 3 significant digits, no trailing zeros.
export function compact(v) {
  if (v == null || Number.isNaN(v)) return DASH;
  const a = Math.abs(v);
  if (a >= 1e6) return (v / 1e6).toFixed(a >= 1e7 ? 0 : 1) + "M";
  if (a >= 1e4) return (v / 1e3).toFixed(a >= 1e5 ? 0 : 1) + "k";
  if (a >= 100 || a === 0 || Number.isInteger(v)) return v.toFixed(0);
  return v.toFixed(a >= 10 ? 1 : 2).replace(/\.?0+$/, "");
}

// Axis ticks: as many decimals as the tick spacing needs ("0.25"), in thousands ("15k") for the
// whole axis once its largest tick reaches 10,000.
export function ticks(splits, incr) {
  const big = Math.max(...splits.map(Math.abs)) >= 1e4;
  const step = big ? incr / 1e3 : incr;
  let decimals = 0;
  while (decimals < 6 && Math.abs(step * 10 ** decimals - Math.round(step * 10 ** decimals)) > 1e-6) decimals++;
  return splits.map((v) => (v === 0 ? "0" : (big ? v / 1e3 : v).toFixed(decimals) + (big ? "k" : "")));
}

const pad2 = (n) => String(n).padStart(2, "0");
const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

// A time tick in 24-hour local time, as precise as the tick spacing: "14:03:05", "14:03",
// and the date at midnight or when ticks are days apart.
export function timeTick(ts, incr) {
  const d = new Date(ts * 1000);
  const date = `${MONTHS[d.getMonth()]} ${d.getDate()}`;
  if (incr >= 86400) return date;
  const hm = `${pad2(d.getHours())}:${pad2(d.getMinutes())}`;
  if (incr < 60) return `${hm}:${pad2(d.getSeconds())}`;
  return d.getHours() === 0 && d.getMinutes() === 0 && incr >= 3600 ? date : hm;
}

// A displayed (already scaled) value with its unit, for legends and tooltips.
export function withUnit(v, axis) {
  if (v == null) return DASH;
  const n = compact(v);
  if (!axis.label) return n;
  return axis.label === "%" ? n + "%" : `${n} ${axis.label}`;
}

// Table cells: the same formats as the template filters of the same name.
const CELLS = {
  pct: (v) => `${Math.round(v)}%`,
  ratio: (v) => `${Math.round(v * 100)}%`,
  gib: (v) => (Math.abs(v) >= GiB ? `${(v / GiB).toFixed(1)} GiB` : `${Math.round(v / MiB)} MiB`),
  num: (v) => (Math.abs(v) >= 10 || Number.isInteger(v) ? v.toFixed(0) : v.toFixed(1)),
  celsius: (v) => `${CELLS.num(v)} °C`,
  mhz: (v) => `${CELLS.num(v)} MHz`,
};

export function formatCell(fmt, v) {
  if (v == null || Number.isNaN(Number(v))) return DASH;
  return (CELLS[fmt] || CELLS.num)(Number(v));
}

export function ago(seconds) {
  if (seconds == null || !Number.isFinite(seconds)) return "never";
  const s = Math.max(0, Math.round(seconds));
  if (s < 90) return `${s} s ago`;
  if (s < 5400) return `${Math.round(s / 60)} min ago`;
  if (s < 172800) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

export function clockTime(ts, withSeconds = true) {
  const d = new Date(ts * 1000);
  return `${pad2(d.getHours())}:${pad2(d.getMinutes())}` + (withSeconds ? `:${pad2(d.getSeconds())}` : "");
}

// Date and time for read-outs: "Mar 2 14:03:05".
export function fullTime(ts) {
  if (ts == null) return DASH;
  const d = new Date(ts * 1000);
  return `${MONTHS[d.getMonth()]} ${d.getDate()} ${clockTime(ts)}`;
}
