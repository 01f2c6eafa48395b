// The popup: the mode switch, the proxy's address and state (from the background's /_swarm/status check),
// "add this site", and the way to the options page.
import { decide, normalisePattern } from "./rules.js";

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
  if (s.ok) {
    $("running").textContent = "running";
    $("running").className = "running";
    $("running").title = "";
    $("version").textContent = s.status?.version ?? "–";
    $("swarmed").textContent = `${s.status?.counters?.transitions ?? 0} requests`;
    $("peers").textContent = `${bytes(s.bytesPeers)} (recent requests)`;
  } else {
    $("running").textContent = "not answering";
    $("running").className = "down";
    $("running").title = s.error ?? "";
    for (const id of ["version", "swarmed", "peers"]) $(id).textContent = "–";
  }
  if (siteHost) {
    $("site").hidden = false;
    $("site-host").textContent = siteHost;
    const listed = c.rules.includes(siteHost);
    $("add-site").hidden = listed;
    const route = decide(siteUrl, c);
    $("site-state").textContent = listed ? "listed" : "";
    if (siteUrl.startsWith("http:")) {
      $("site-state").textContent += ` · ${route === "proxy" ? "through swarmproxy" : "direct"}`;
    }
  }
}

function fail(err) {
  $("message").hidden = false;
  $("message").textContent = String(err?.message ?? err);
}

async function findSite() {
  try {
    const [tab] = await api.tabs.query({ active: true, currentWindow: true });
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
  $("options").addEventListener("click", (event) => {
    event.preventDefault();
    api.runtime.openOptionsPage();
    window.close();
  });
  await findSite();
  send({ type: "get" }).then(show, fail);
  send({ type: "get", refresh: true }).then(show, fail);
});
