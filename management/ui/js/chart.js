// A small hand-written SVG line chart (no library): time on x, values on y, one legend row.
const NS = "http://www.w3.org/2000/svg";
export const COLORS = ["#edc240", "#afd8f8", "#cb4b4b", "#4da74d", "#9440ed", "#ff7f0e"];

function svg(tag, attrs = {}, text) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (text !== undefined) el.textContent = text;
  return el;
}

function niceMax(v) {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 5, 10].map((m) => m * p).find((m) => m >= v);
}

/**
 * lineChart(series, {width, height, unit}) -> <div class="chart"> with an SVG and a legend.
 * series: [{label, points: [[timeMs, value], ...]}]; the legend shows each latest value.
 */
export function lineChart(series, { width = 520, height = 160, unit = "" } = {}) {
  const pad = { l: 46, r: 8, t: 8, b: 20 };
  const w = width - pad.l - pad.r;
  const hgt = height - pad.t - pad.b;
  const all = series.flatMap((s) => s.points);
  const now = all.length ? Math.max(...all.map((p) => p[0])) : Date.now();
  const t0 = Math.min(now - 60_000, ...all.map((p) => p[0]));
  const top = niceMax(Math.max(0, ...all.map((p) => p[1])));
  const x = (t) => pad.l + ((t - t0) / Math.max(1, now - t0)) * w;
  const y = (v) => pad.t + hgt - (v / top) * hgt;
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "img" });
  for (let i = 0; i <= 4; i += 1) {
    const v = (top * i) / 4;
    root.append(svg("line", { x1: pad.l, x2: pad.l + w, y1: y(v), y2: y(v), class: "grid" }));
    root.append(svg("text", { x: pad.l - 4, y: y(v) + 4, "text-anchor": "end", class: "axis" },
      `${Number.isInteger(v) ? v : v.toFixed(2).replace(/0$/, "")}${unit}`));
  }
  const clock = (t) => new Date(t).toLocaleTimeString("en-GB");
  root.append(svg("text", { x: pad.l, y: height - 4, class: "axis" }, clock(t0)));
  root.append(svg("text", { x: pad.l + w, y: height - 4, "text-anchor": "end", class: "axis" }, clock(now)));
  const legend = document.createElement("ul");
  legend.className = "legend";
  series.forEach((s, i) => {
    const color = s.color ?? COLORS[i % COLORS.length];
    if (s.points.length) {
      const d = s.points.map((p, j) => `${j ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join("");
      root.append(svg("path", { d, fill: "none", stroke: color, "stroke-width": 2 }));
      const [t, v] = s.points[s.points.length - 1]; // the latest sample, visible from the first one
      root.append(svg("circle", { cx: x(t).toFixed(1), cy: y(v).toFixed(1), r: 3, fill: color }));
    }
    const last = s.points.length ? s.points[s.points.length - 1][1] : 0;
    const item = document.createElement("li");
    const swatch = document.createElement("span");
    swatch.className = "swatch";
    swatch.style.background = color;
    item.append(swatch, `${s.label} `, Object.assign(document.createElement("b"),
      { textContent: `${Number.isInteger(last) ? last : last.toFixed(1)}${unit}` }));
    legend.append(item);
  });
  const box = document.createElement("div");
  box.className = "chart";
  box.append(root, legend);
  return box;
}
