// The status page: polls the admin API (same origin) every 1.5 s and fills the page in. Every string from the
// proxy, URLs and names that strangers chose among them, goes into the page as textContent (or a title, or canvas
// text), never as markup; a URL is shown, never made a link. When the proxy does not answer, the page says so and
// asks again, less and less often (at most every 5 s), and carries on by itself once a proxy answers again.
import { bytes, CAUSE_COLOURS, drawRates, drawTransitions, rate, SOURCES } from "./plots.js";

const POLL_MS = 1500;
const HIDDEN_POLL_MS = 5000; // a tab in the background needs no fresh figures
const MAX_RETRY_MS = 5000;
const PAGE = 100; // records shown, and how many more each "Show more" adds: 1,000 rows would slow every poll
const MAX_TEXT = 600; // characters of a stranger's string put in a cell (all of it, up to 4,000, in its title)
const MAX_FACTS = 80;

const $ = (id) => document.getElementById(id);
const state = { limit: PAGE, failures: 0, polls: 0, expanded: new Set(), shown: {}, timer: null, running: false,
  again: false };

// Characters that change how the text around them reads without showing (direction overrides and isolates,
// zero-width and control characters) are shown as their code points: a URL cannot pose as another.
const HIDDEN = /[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]/gu;
export function visible(text) {
  return String(text ?? "").replace(HIDDEN, (c) => `⟨U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}⟩`);
}

function clip(text, limit) {
  return text.length > limit ? `${text.slice(0, limit)}…` : text;
}

function element(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = text;
  if (className) node.className = className;
  return node;
}

// A cell of a stranger's text: isolated from its neighbours' direction, clipped, the whole in its title.
function textCell(value, className) {
  const shown = visible(value);
  const td = element("td", clip(shown, MAX_TEXT), `text ${className ?? ""}`.trim());
  td.title = clip(shown, 4000);
  return td;
}

async function get(path, { optional = false } = {}) {
  const response = await fetch(path, { cache: "no-store", credentials: "same-origin", redirect: "error" });
  if (optional && response.status === 404) return null;
  if (!response.ok) {
    let why = `${path}: HTTP ${response.status}`;
    try {
      const body = await response.json();
      if (body && typeof body.error === "string") why += ` (${body.error})`;
    } catch {
      // not JSON: the status alone says enough
    }
    throw new Error(why);
  }
  return response.json();
}

function clock(seconds) {
  if (!seconds) return "–";
  return new Date(seconds * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  return seconds < 10 ? `${seconds.toFixed(2)} s` : seconds < 600 ? `${seconds.toFixed(1)} s`
    : `${Math.round(seconds / 60)} min`;
}

// Where a record's bytes came from: origin, peers, BitTorrent, and while a download is under way "swarm", what the
// block engine delivered before its end says how much of it was peers' and how much the origin's Range answers.
const PARTS = [["origin", "origin"], ["peers", "peers"], ["swarm", "peers"], ["bittorrent", "bittorrent"]];

function received(record) {
  return PARTS.reduce((sum, [name]) => sum + (record[`bytes_${name}`] || 0), 0);
}

function sourceCell(record) {
  const td = element("td");
  const amounts = PARTS.map(([name]) => record[`bytes_${name}`] || 0);
  const total = amounts.reduce((a, b) => a + b, 0);
  const bar = element("div", null, "split");
  const words = [];
  PARTS.forEach(([source, look], i) => {
    if (!amounts[i]) return;
    const part = element("span", null, look);
    // CSSOM, not a style attribute: the policy's style-src allows it, as it would not `style="…"` in markup.
    part.style.width = `${(100 * amounts[i]) / total}%`;
    part.title = `${source}: ${bytes(amounts[i])}`;
    bar.append(part);
    words.push(`${source} ${Math.round((100 * amounts[i]) / total)} %`);
  });
  td.append(bar, element("div", total ? words.join(" · ") : "no body bytes", "split-text"));
  return td;
}

function recordRow(record, underWay) {
  const tr = element("tr", null, "record");
  tr.dataset.id = String(record.id ?? "");
  const size = record.duration_s === null ? received(record) : record.bytes;
  const why = record.swarm_skipped ?? record.swarm_error ?? "";
  const transition = [record.transition, record.switch_verdict].filter(Boolean).join(" · ");
  const elapsed = underWay ? Math.max(0, Date.now() / 1000 - record.started) : record.duration_s;
  tr.append(
    element("td", clock(record.started)),
    textCell(record.method, "method"),
    textCell(record.url, "url"),
    element("td", record.status ?? (record.duration_s === null ? "…" : "–"), record.error ? "error" : ""),
    element("td", bytes(size), "num bytes"),
    sourceCell(record),
    textCell(transition || "–", "transition"),
    textCell(record.error ? `${why ? `${why}; ` : ""}error: ${record.error}` : why || "–", "why"),
    element("td", duration(elapsed), "num"),
  );
  if (record.error) tr.lastChild.previousSibling.classList.add("error");
  return tr;
}

function detailsRow(record) {
  const tr = element("tr", null, "details");
  const td = element("td");
  td.colSpan = 9;
  const facts = [
    ["request", record.id], ["client", record.client], ["manifest from", record.manifest_source],
    ["T / R / W", record.first_byte_timeout === null ? null
      : `${record.first_byte_timeout} s / ${rate(record.min_rate)} / ${record.rate_window} s (${record.trw_source})`],
    ["peers", (record.peers || []).join(", ")], ["segments", (record.segments || []).join(" ")],
    ["swarm error", record.swarm_error],
  ];
  const dl = element("dl", null, "facts");
  for (const [name, value] of facts) {
    if (value === null || value === undefined || value === "") continue;
    const dd = element("dd", clip(visible(value), 2000), "text");
    dl.append(element("dt", name), dd);
  }
  const events = element("ul");
  for (const line of record.events || []) events.append(element("li", clip(visible(line), 2000), "text"));
  td.append(dl, events.childElementCount ? events : element("p", "No decision recorded.", "muted"));
  tr.append(td);
  return tr;
}

function fillRecords(table, records, underWay) {
  const tbody = table.tBodies[0];
  const key = JSON.stringify([records, [...state.expanded]]);
  if (state.shown[table.id] === key) return; // nothing changed: the DOM stays (and a selection in it)
  state.shown[table.id] = key;
  const rows = [];
  for (const record of records) {
    rows.push(recordRow(record, underWay));
    if (state.expanded.has(record.id)) rows.push(detailsRow(record));
  }
  tbody.replaceChildren(...rows);
}

function flatten(prefix, value, rows, depth) {
  if (rows.length >= MAX_FACTS) return;
  if (value === null || value === undefined) {
    rows.push([prefix, "–"]);
  } else if (Array.isArray(value)) {
    if (value.every((v) => v === null || typeof v !== "object")) rows.push([prefix, value.length ? value.join(", ") : "none"]);
    else value.slice(0, 8).forEach((v, i) => flatten(`${prefix}[${i}]`, v, rows, depth + 1));
  } else if (typeof value === "object") {
    if (depth >= 3) rows.push([prefix, JSON.stringify(value)]);
    else for (const [k, v] of Object.entries(value)) flatten(prefix ? `${prefix}.${k}` : k, v, rows, depth + 1);
  } else {
    rows.push([prefix, String(value)]);
  }
}

function fillFacts(dl, value, empty) {
  const rows = [];
  if (value === null || value === undefined) rows.push(["", empty]);
  else flatten("", value, rows, 0);
  const key = JSON.stringify(rows);
  if (state.shown[dl.id] === key) return;
  state.shown[dl.id] = key;
  const nodes = [];
  for (const [name, text] of rows) {
    nodes.push(element("dt", visible(name)), element("dd", clip(visible(text), MAX_TEXT), "text"));
  }
  dl.replaceChildren(...nodes);
}

function fillPeers(peers) {
  const rows = (peers?.peers || []).map((p) => {
    const tr = element("tr");
    tr.append(textCell(p.address), element("td", p.transport), element("td", p.direction),
      textCell(p.node ?? "–"), textCell(p.root ?? "–"), element("td", rate(p.rate_up), "num"),
      element("td", rate(p.rate_down), "num"), element("td", bytes(p.bytes_up), "num"),
      element("td", bytes(p.bytes_down), "num"));
    return tr;
  });
  $("peers").tBodies[0].replaceChildren(...rows);
  $("peers-empty").hidden = rows.length > 0;
  $("peers-empty").textContent = peers?.engine === false ? "The block engine is off (--peer-listen off): no peers."
    : "No peer connection now.";
  $("peers-count").textContent = rows.length ? `(${peers.connections})` : "";
  const bt = peers?.bittorrent;
  $("peer-count").textContent = String((peers?.connections ?? 0) + (bt?.peers ?? 0));
  $("peer-rates").textContent = `↑ ${rate(peers?.rate_up)} ↓ ${rate(peers?.rate_down)}`
    + (bt ? ` · ${bt.peers ?? 0} BitTorrent` : "");
}

function fillSummary(status) {
  const today = status.today || {};
  $("version").textContent = `${status.version} · up ${duration(status.uptime_s)} · ${status.listen?.proxy ?? ""}`;
  $("saved").textContent = bytes(today.bytes_peers ?? 0);
  $("today-requests").textContent = String(today.requests ?? 0);
  $("today-swarmed").textContent = `${today.requests_swarmed ?? 0} swarmed (some bytes from peers)`;
  $("today-transitions").textContent = String(today.transitions ?? 0);
  $("today-since").textContent = today.since ? `since ${clock(today.since)}` : "";
}

function fillPlots(timeline) {
  drawRates($("rate-plot"), timeline);
  const causes = Object.keys(timeline.transitions);
  drawTransitions($("transition-plot"), timeline, causes);
  const legend = (id, items) => {
    const key = JSON.stringify(items);
    if (state.shown[id] === key) return;
    state.shown[id] = key;
    $(id).replaceChildren(...items.map(([cls, label]) => {
      const item = element("span");
      item.append(element("span", null, `swatch ${cls}`), document.createTextNode(label));
      return item;
    }));
  };
  const last = (list) => list.slice(-6).reduce((a, b) => a + b, 0) / (6 * timeline.bucket_s);
  legend("rate-legend", SOURCES.map((s) => [`s-${s}`, `${s} ${rate(last(timeline.bytes[s]))} (last minute)`]));
  legend("transition-legend", causes.length
    ? causes.map((c, i) => [`c${i % CAUSE_COLOURS.length}`, `${visible(c)} ${timeline.transitions[c].reduce((a, b) => a + b, 0)}`])
    : [["", "no transition in the last hour"]]);
}

async function poll() {
  const limit = state.limit;
  const status = await get("/_swarm/status");
  // Discovery answers 404 when no backend runs: asked only when the status names one (no error in the console).
  const discovering = Boolean(status.listen?.dht || status.network?.mainline);
  const [recent, underWay, timeline, peers, discovery] = await Promise.all([
    get(`/_swarm/requests?order=newest&limit=${limit}`),
    get("/_swarm/requests?order=newest&under_way=1"),
    get("/_swarm/timeline"),
    get("/_swarm/peers"),
    discovering ? get("/_swarm/discovery", { optional: true }) : null,
  ]);
  fillSummary(status);
  fillRecords($("recent"), recent, false);
  $("recent-empty").hidden = recent.length > 0;
  $("recent-count").textContent = recent.length ? `(${recent.length} shown)` : "";
  $("more").hidden = recent.length < limit;
  fillRecords($("under-way"), underWay, true);
  $("under-way-empty").hidden = underWay.length > 0;
  $("under-way-count").textContent = underWay.length ? `(${underWay.length})` : "";
  fillPeers(peers);
  fillPlots(timeline);
  fillFacts($("network"), status.network, "not on any network");
  fillFacts($("discovery"), discovery, "discovery is off (--dht-listen off)");
  fillFacts($("engine"), { swarm: status.swarm, bittorrent: status.bittorrent }, "");
}

function setState(up, why) {
  $("state").dataset.state = up ? "up" : "down";
  $("state").textContent = up ? "live" : "not answering";
  document.body.dataset.state = up ? "up" : "down";
  $("down").hidden = up;
  $("down-why").textContent = up ? "" : visible(why);
}

async function loop() {
  if (state.running) { // one poll at a time: a click during one asks for another right after it
    state.again = true;
    return;
  }
  state.running = true;
  clearTimeout(state.timer);
  try {
    await poll();
    state.failures = 0;
    state.polls += 1;
    // The moment the first figures are on screen, for `python -m bench.status_page` (its load time).
    if (state.polls === 1) performance.mark("swarmproxy-first-render");
    document.body.dataset.polls = String(state.polls); // what a test waits on: one more poll answered
    $("updated").textContent = `updated ${clock(Date.now() / 1000)}`;
    setState(true);
  } catch (error) {
    state.failures += 1;
    setState(false, `${error?.message ?? error} (attempt ${state.failures}; asking again in `
      + `${Math.round(retryDelay() / 1000)} s)`);
  }
  state.running = false;
  const delay = state.again ? 0 : state.failures ? retryDelay() : document.hidden ? HIDDEN_POLL_MS : POLL_MS;
  state.again = false;
  state.timer = setTimeout(loop, delay);
}

function retryDelay() {
  return Math.min(MAX_RETRY_MS, 1000 * 2 ** Math.max(0, state.failures - 1));
}

function toggle(event) {
  const row = event.target.closest("tr.record");
  if (!row) return;
  const id = row.dataset.id;
  if (state.expanded.has(id)) state.expanded.delete(id);
  else state.expanded.add(id);
  loop();
}

document.addEventListener("DOMContentLoaded", () => {
  $("recent").addEventListener("click", toggle);
  $("under-way").addEventListener("click", toggle);
  $("more").addEventListener("click", () => {
    state.limit += PAGE; // a view of more of the history, in this page only: the proxy keeps what it keeps
    loop();
  });
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) loop();
  });
  loop();
});
