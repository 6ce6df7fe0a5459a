// The page's colours as pitwall.css defines them (light, or dark when the system prefers it),
// for what CSS cannot colour itself: uPlot's canvas axes, grid and series, the heatmaps.

const DARK = typeof matchMedia === "function" ? matchMedia("(prefers-color-scheme: dark)") : null;

// The value of `--name` on the root element ("" when unset).
export function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(`--${name}`).trim();
}

export function cssColour(name, fallback) {
  return cssVar(name) || fallback;
}

// A space-separated list of colours (--chart-series).
export function cssList(name, fallback) {
  const items = cssVar(name).split(/\s+/).filter(Boolean);
  return items.length ? items : fallback;
}

// [r, g, b] of "#rrggbb" (the heatmaps paint pixels).
export function rgb(hex, fallback) {
  const m = /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(hex || "");
  return m ? [1, 2, 3].map((i) => parseInt(m[i], 16)) : fallback;
}

// Calls `redraw` when the system switches between light and dark.
export function onThemeChange(redraw) {
  DARK?.addEventListener("change", redraw);
}
