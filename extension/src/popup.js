// The popup: the mode switch, the proxy's address and state (from the background's /_swarm/status check),
// "add this site", and the way to the options page.
import { decide, normalisePattern, statusPageUrl } from "./rules.js";

const api = globalThis.browser ?? globalThis.chrome;
const $ = (id) => document.getElementById(id);
let current = null;
let siteHost = null;
let siteUrl = null;

function send(message) {
  return api.runtime.sendMessage(message).then((answer) => {
    if (answer?.failure) throw new Error(answer.failure);
    return answer;
  });
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

function show(s) {
  current = s;
  const c = s.config;
  $("badge").textContent = s.badge || "…";
  $("badge").className = `pill ${s.badge}`;
  $("conflict").hidden = !s.conflict;
  for (const input of document.querySelectorAll("input[name=mode]")) input.checked = input.value === c.mode;
  $("modes").dataset.applied = s.applied ? JSON.parse(s.applied).mode : "";
  $("proxy").textContent = c.proxy;
  $("status-page").href = statusPageUrl(c.proxy);
  if (s.ok) {
    $("running").textContent = "running";
    $("running").className = "running";
    $("running").title = "";
    $("version").textContent = s.status?.version ?? "–";
    // Today's (since midnight, or since the proxy started if later), and since it started in the tooltip.
    const today = s.status?.today;
    const counters = s.status?.counters;
    $("swarmed").textContent = today ? `${today.requests_swarmed} of ${today.requests} requests today` : "–";
    $("peers").textContent = today ? `${bytes(today.bytes_peers)} today` : "–";
    const from = new Date((today?.since ?? 0) * 1000);
    const since = from.getHours() + from.getMinutes() + from.getSeconds() === 0 ? "since midnight"
      : `since ${from.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })}, when the proxy started`;
    const total = counters ? `; since the proxy started: ${counters.requests_swarmed} requests swarmed, `
      + `${bytes(counters.bytes_peers)} from peers` : "";
    $("swarmed").title = $("peers").title = `Today (${since})${total}`;
  } else {
    $("running").textContent = "not answering";
    $("running").className = "down";
    $("running").title = s.error ?? "";
    for (const id of ["version", "swarmed", "peers"]) {
      $(id).textContent = "–";
      $(id).title = "";
    }
  }
  if (siteHost) {
    $("site").hidden = false;
    $("site-host").textContent = siteHost;
    const listed = c.rules.includes(siteHost);
    $("add-site").hidden = listed;
    const state = [listed ? "listed" : "not listed"];
    // (https:// pages never go through the proxy; their downloads may, which the popup does not predict.)
    if (siteUrl.startsWith("http:")) state.push(decide(siteUrl, c) === "proxy" ? "through swarmproxy" : "direct");
    $("site-state").textContent = state.join(" · ");
  }
}

function fail(err) {
  $("message").hidden = false;
  $("message").textContent = String(err?.message ?? err);
}

// The tab whose site "Add this site" adds. As the toolbar button's popup: the active tab of its window. Opened
// as a page in a tab of its own (a user can open src/popup.html so; the browser tests do, as no automation
// opens the toolbar popup), the active tab is this page itself: then the tab looked at last before it.
async function currentTab() {
  const own = await api.tabs.getCurrent(); // undefined in the toolbar popup
  if (!own) return (await api.tabs.query({ active: true, currentWindow: true }))[0];
  const others = (await api.tabs.query({ windowType: "normal" })).filter((t) => t.id !== own.id);
  return others.sort((a, b) => (b.lastAccessed ?? 0) - (a.lastAccessed ?? 0))[0];
}

async function findSite() {
  try {
    const tab = await currentTab();
    const url = new URL(tab?.url ?? "");
    if (url.protocol === "http:" || url.protocol === "https:") {
      siteHost = normalisePattern(url.hostname);
      siteUrl = url.href;
    }
  } catch {
    siteHost = null; // no tab, or a page of the browser's own
  }
}

document.addEventListener("DOMContentLoaded", async () => {
  for (const input of document.querySelectorAll("input[name=mode]")) {
    input.addEventListener("change", () => {
      $("modes").dataset.applied = "";
      send({ type: "set", config: { mode: input.value } }).then(show, fail);
    });
  }
  $("add-site").addEventListener("click", () => {
    send({ type: "set", config: { rules: [...current.config.rules, siteHost] } }).then(show, fail);
  });
  $("refresh").addEventListener("click", () => send({ type: "get", refresh: true }).then(show, fail));
  // Opened by the browser (tabs.create), not as this page's navigation: the proxy then sees the user's own request
  // (Sec-Fetch-Site: none), as for an address typed, and not an extension page's, which Chromium calls cross-site.
  $("status-page").addEventListener("click", (event) => {
    event.preventDefault();
    if ($("status-page").href.startsWith("http:")) api.tabs.create({ url: $("status-page").href });
    window.close();
  });
  $("options").addEventListener("click", (event) => {
    event.preventDefault();
    api.runtime.openOptionsPage();
    window.close();
  });
  await findSite();
  send({ type: "get" }).then(show, fail);
  send({ type: "get", refresh: true }).then(show, fail);
});
