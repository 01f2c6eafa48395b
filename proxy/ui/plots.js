// The status page's two plots, drawn on <canvas> from /_swarm/timeline's columns: bytes per second by source
// (stacked), and transitions to the swarm per bucket by cause (stacked bars). Only numbers and our own labels are
// drawn; cause names come from the proxy's download core, and are drawn as canvas text, never as markup.

export const SOURCES = ["origin", "peers", "bittorrent"];
const SOURCE_COLOURS = { origin: "#3b6fd8", peers: "#2e9d57", bittorrent: "#e08a1e" };
// The same colours as status.css's .c0 … .c7, which the legend uses.
export const CAUSE_COLOURS = ["#8e44ad", "#d35454", "#1f9aa8", "#b58900", "#6c7a89", "#d6336c", "#4c6ef5", "#37b24d"];
const PAD = { left: 72, right: 8, top: 8, bottom: 20 };

export function rate(n) {
  if (n === null || n === undefined) return "–";
  return `${bytes(n)}/s`;
}

export function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "kB", "MB", "GB", "TB"];
  let i = 0;
  while (Math.abs(n) >= 1000 && i < units.length - 1) {
    n /= 1000;
    i++;
  }
  return `${i ? n.toFixed(n < 10 ? 2 : 1) : Math.round(n)} ${units[i]}`;
}

// A canvas sized to its box in device pixels, its context scaled so that drawing is in CSS pixels.
function prepare(canvas) {
  const ratio = window.devicePixelRatio || 1;
  const width = Math.max(200, canvas.clientWidth || 640);
  const height = Math.max(80, canvas.clientHeight || 180);
  if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(height * ratio)) {
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
  }
  const g = canvas.getContext("2d");
  g.setTransform(ratio, 0, 0, ratio, 0, 0);
  g.clearRect(0, 0, width, height);
  const dark = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
  return { g, width, height, ink: dark ? "#bbb" : "#555", grid: dark ? "#444" : "#e3e6ec" };
}

function niceMax(value) {
  if (value <= 0) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) if (step * power >= value) return step * power;
  return 10 * power;
}

function frame(p, max, format, timeline) {
  const { g, width, height } = p;
  g.font = "11px system-ui, sans-serif";
  g.fillStyle = p.ink;
  g.strokeStyle = p.grid;
  g.lineWidth = 1;
  const plotH = height - PAD.top - PAD.bottom;
  for (let i = 0; i <= 4; i++) {
    const y = PAD.top + plotH - (plotH * i) / 4;
    g.beginPath();
    g.moveTo(PAD.left, Math.round(y) + 0.5);
    g.lineTo(width - PAD.right, Math.round(y) + 0.5);
    g.stroke();
    g.textAlign = "right";
    g.textBaseline = "middle";
    g.fillText(format((max * i) / 4), PAD.left - 6, y);
  }
  g.textAlign = "center";
  g.textBaseline = "top";
  const minutes = Math.round(timeline.span_s / 60);
  for (const back of [minutes, (minutes * 3) / 4, minutes / 2, minutes / 4, 0]) {
    const x = PAD.left + ((width - PAD.left - PAD.right) * (minutes - back)) / minutes;
    g.fillText(back ? `−${Math.round(back)} min` : "now", Math.min(width - 16, Math.max(PAD.left + 16, x)),
      height - PAD.bottom + 4);
  }
}

export function drawRates(canvas, timeline) {
  const p = prepare(canvas);
  const n = timeline.bytes.origin.length;
  const perSecond = (v) => v / timeline.bucket_s;
  const stacked = [];
  let top = 0;
  for (let i = 0; i < n; i++) {
    let sum = 0;
    const row = [];
    for (const source of SOURCES) {
      sum += perSecond(timeline.bytes[source][i]);
      row.push(sum);
    }
    stacked.push(row);
    top = Math.max(top, sum);
  }
  const max = niceMax(top);
  frame(p, max, (v) => (v ? rate(v) : "0"), timeline);
  const { g, width, height } = p;
  const plotW = width - PAD.left - PAD.right;
  const plotH = height - PAD.top - PAD.bottom;
  const x = (i) => PAD.left + (plotW * (i + 0.5)) / n;
  const y = (v) => PAD.top + plotH - (plotH * v) / max;
  // From the top layer down, each filled to the axis: the layers below paint over their part.
  for (let s = SOURCES.length - 1; s >= 0; s--) {
    g.beginPath();
    g.moveTo(x(0), y(0));
    for (let i = 0; i < n; i++) g.lineTo(x(i), y(stacked[i][s]));
    g.lineTo(x(n - 1), y(0));
    g.closePath();
    g.fillStyle = SOURCE_COLOURS[SOURCES[s]];
    g.fill();
  }
}

export function drawTransitions(canvas, timeline, causes) {
  const p = prepare(canvas);
  const n = timeline.bytes.origin.length;
  let top = 0;
  for (let i = 0; i < n; i++) {
    let sum = 0;
    for (const cause of causes) sum += timeline.transitions[cause][i];
    top = Math.max(top, sum);
  }
  const max = Math.max(4, Math.ceil(top / 4) * 4);
  frame(p, max, (v) => String(Math.round(v)), timeline);
  const { g, width, height } = p;
  const plotW = width - PAD.left - PAD.right;
  const plotH = height - PAD.top - PAD.bottom;
  const barW = Math.max(1, plotW / n - 0.5);
  for (let i = 0; i < n; i++) {
    let base = 0;
    causes.forEach((cause, c) => {
      const count = timeline.transitions[cause][i];
      if (!count) return;
      const h = (plotH * count) / max;
      g.fillStyle = CAUSE_COLOURS[c % CAUSE_COLOURS.length];
      g.fillRect(PAD.left + (plotW * i) / n, PAD.top + plotH - base - h, barW, h);
      base += h;
    });
  }
}
