// The small chart of a webhook's attempts per minute over the last hour, by outcome: an inline
// SVG built node by node (GET /v1/webhooks/{id}/stats/minutes).

import { h, svg } from "./dom.js";

export const OUTCOMES = [
  ["success", "success"],
  ["http_error", "HTTP error"],
  ["timeout", "timeout"],
  ["connection_error", "connection error"],
  ["blocked", "blocked"],
];

const WIDTH = 600;
const HEIGHT = 110;
const TOP = 14;
const AXIS = 16;

function total(counts) {
  return OUTCOMES.reduce((sum, [outcome]) => sum + (counts[outcome] || 0), 0);
}

function describe(counts) {
  const parts = OUTCOMES.filter(([outcome]) => counts[outcome])
    .map(([outcome, caption]) => `${counts[outcome]} ${caption}`);
  return parts.length ? parts.join(", ") : "no attempts";
}

function clock(iso) {
  return new Date(iso).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
}

/** The chart of `minutes` (oldest first), with a legend that totals each outcome. */
export function attemptsChart(minutes) {
  const sums = Object.fromEntries(OUTCOMES.map(([outcome]) => [outcome, 0]));
  for (const minute of minutes) {
    for (const [outcome] of OUTCOMES) sums[outcome] += minute.attempts[outcome] || 0;
  }
  const highest = Math.max(1, ...minutes.map((minute) => total(minute.attempts)));
  const slot = WIDTH / Math.max(minutes.length, 1);
  const plot = HEIGHT - TOP - AXIS;
  const summary = `Attempts per minute over the last hour: ${describe(sums)}.`;
  const bars = minutes.map((minute, index) => {
    let y = TOP + plot;
    const pieces = [];
    for (const [outcome] of OUTCOMES) {
      const count = minute.attempts[outcome] || 0;
      if (!count) continue;
      const height = Math.max((count / highest) * plot, 1);
      y -= height;
      pieces.push(svg("rect", {
        class: `bar bar-${outcome}`,
        x: (index * slot + 1).toFixed(1),
        y: y.toFixed(1),
        width: Math.max(slot - 2, 1).toFixed(1),
        height: height.toFixed(1),
      }));
    }
    // A full-height transparent slot carries the minute's tooltip.
    return svg("g", { class: "minute" },
      svg("title", {}, `${clock(minute.minute)}: ${describe(minute.attempts)}`),
      svg("rect", { class: "slot", x: (index * slot).toFixed(1), y: TOP, width: slot.toFixed(1), height: plot }),
      pieces);
  });
  const labels = minutes.length
    ? [
      svg("text", { x: 0, y: HEIGHT - 3, class: "axis-label" }, clock(minutes[0].minute)),
      svg("text", { x: WIDTH, y: HEIGHT - 3, class: "axis-label", "text-anchor": "end" }, "now"),
    ]
    : [];
  const chart = svg("svg", {
    class: "chart",
    viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
    role: "img",
    "aria-label": summary,
  },
  svg("title", {}, summary),
  svg("text", { x: 0, y: 10, class: "axis-label" }, `${highest}/min`),
  svg("line", { x1: 0, x2: WIDTH, y1: TOP + plot + 0.5, y2: TOP + plot + 0.5, class: "axis" }),
  bars,
  labels);
  const legend = h("ul", { class: "legend", "aria-label": "Attempts in the last hour by outcome" },
    OUTCOMES.map(([outcome, caption]) => h("li", {},
      h("span", { class: `swatch swatch-${outcome}`, "aria-hidden": "true" }),
      `${caption} ${sums[outcome]}`)));
  return h("figure", { class: "chart-box" }, chart, legend);
}
