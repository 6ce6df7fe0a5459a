// Efficiency page: one chart of generation tokens/s of the busiest engines over the page's
// range (the tables are rendered on the server). History only: the range is fixed.

import { LineChart } from "./chart.js";
import { fetchLine } from "./series.js";
import { pageConfig } from "./dom.js";

const cfg = pageConfig();
const window_ = () => [cfg.range.from, cfg.range.to];

async function draw(fig) {
  const chart = new LineChart(fig, { window: window_, onZoom: () => {}, labels: new Map() });
  try {
    const parts = await Promise.all(chart.lines.map((line) => fetchLine(
      cfg.series_url, line, cfg.range.from, cfg.range.to, chart.plotWidth())));
    chart.load(parts.flat());
  } catch (err) {
    chart.showError(String(err.message || err));
  }
}

await Promise.all([...document.querySelectorAll("figure[data-chart]")].map(draw));
document.body.dataset.ready = "1";
