// The background of the extension: Chromium runs it as the service worker, Firefox as the background script
// (manifest.json names it both ways). It holds the configuration (storage.sync), routes requests (Chromium: a
// PAC script in proxy.settings; Firefox: proxy.onRequest), keeps the badge true to /_swarm/status, and sends
// HTTPS downloads on listed sites (and "Download with swarmproxy") through the proxy's explicit fetch.
import {
  decide, downloadFileName, fetchUrl, firefoxProxyInfo, generatePac, isLocalHost, normaliseConfig,
  shouldFetchDownload,
} from "./rules.js";
import { addTransfer, matchRecord, tabBadge, transferOf } from "./transfers.js";

const api = globalThis.browser ?? globalThis.chrome;
// Firefox has proxy.onRequest (and no PAC from an extension without private-browsing permission); Chromium
// has proxy.settings with pac_script and no onRequest.
const FIREFOX = Boolean(api.proxy && api.proxy.onRequest);
const STATUS_TIMEOUT_MS = 2500;
const MENU_ID = "swarmproxy-download";

const state = {
  config: normaliseConfig({}),
  applied: null,      // the configuration (JSON) last put into effect
  ok: null,           // the proxy answered /_swarm/status at the last check
  status: null,       // its answer
  bytesPeers: null,   // bytes from peers over the requests /_swarm/requests still shows
  error: null,        // why the last check failed
  checkedAt: null,
  control: null,      // proxy.settings' levelOfControl (Chromium; Firefox where it can be read)
  badge: "",
};

async function loadConfig() {
  state.config = normaliseConfig(await api.storage.sync.get(null));
}

async function checkControl() {
  try {
    const details = await api.proxy.settings.get({});
    state.control = details.levelOfControl ?? null;
  } catch {
    state.control = null; // Firefox without private-browsing permission: onRequest does not need it
  }
}

async function applyProxy() {
  const c = state.config;
  if (!FIREFOX) {
    if (c.mode === "off") {
      await api.proxy.settings.clear({ scope: "regular" });
    } else {
      // mandatory: false makes Chromium go direct, not fail, should the script ever not run.
      await api.proxy.settings.set({
        value: { mode: "pac_script", pacScript: { data: generatePac(c), mandatory: false } }, scope: "regular",
      });
    }
  }
  await checkControl();
  state.applied = JSON.stringify(c);
}

function conflict() {
  return state.control === "controlled_by_other_extensions" || state.control === "not_controllable";
}

async function updateBadge() {
  let text;
  let color;
  let title;
  if (state.config.mode === "off") {
    [text, color, title] = ["OFF", "#777777", "swarmproxy: off, every request goes direct"];
  } else if (conflict()) {
    [text, color, title] = ["ERR", "#c62828", "swarmproxy: another extension or a policy controls the proxy setting"];
  } else if (state.ok) {
    [text, color, title] = ["ON", "#2e7d32",
      `swarmproxy ${state.status?.version ?? ""} at ${state.config.proxy}: ${state.config.mode === "all" ? "every site" : "listed sites"}`];
  } else {
    [text, color, title] = ["ERR", "#c62828",
      `swarmproxy at ${state.config.proxy} does not answer (${state.error}); browsing goes direct`];
  }
  state.badge = text;
  await Promise.all([
    api.action.setBadgeText({ text }),
    api.action.setBadgeBackgroundColor({ color }),
    api.action.setTitle({ title }),
  ]);
}

async function getJson(path) {
  const response = await fetch(`http://${state.config.proxy}${path}`, {
    cache: "no-store", credentials: "omit", signal: AbortSignal.timeout(STATUS_TIMEOUT_MS),
  });
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
}

let checking = null;

// Asks the proxy how it is (/_swarm/status, and /_swarm/requests for the bytes from peers), then sets the badge.
// One check at a time: a caller that comes while one runs gets its result, unless `fresh` (the configuration
// changed: that check may have asked the old address), which waits for it and checks again.
async function refreshStatus(fresh = false) {
  while (checking) {
    await checking;
    if (!fresh) return snapshot();
  }
  checking = (async () => {
    try {
      state.status = await getJson("/_swarm/status");
      try {
        const records = await getJson("/_swarm/requests");
        state.bytesPeers = records.reduce((sum, r) => sum + (r.bytes_peers || 0), 0);
      } catch {
        state.bytesPeers = null;
      }
      state.ok = true;
      state.error = null;
    } catch (err) {
      state.ok = false;
      state.status = null;
      state.error = err?.name === "TimeoutError" ? "no answer" : String(err?.message ?? err);
    }
    state.checkedAt = Date.now();
    await updateBadge();
  })();
  try {
    await checking;
  } finally {
    checking = null;
  }
  return snapshot();
}

function snapshot() {
  return { ...state, firefox: FIREFOX, conflict: conflict() };
}

async function setConfig(patch) {
  state.config = normaliseConfig({ ...state.config, ...patch });
  await api.storage.sync.set(state.config);
  await applyProxy();
  if (state.config.mode === "off") await Promise.all([...tabs.keys()].map(showTabBadge));
  return refreshStatus(true);
}

const ready = (async () => {
  await loadConfig();
  await applyProxy();
  await refreshStatus();
})();

// Listeners are added synchronously, at the top level, so that a woken service worker / event page gets its
// event; each waits for the configuration first.

if (FIREFOX) {
  api.proxy.onRequest.addListener(async (details) => {
    await ready;
    return firefoxProxyInfo(details.url, state.config);
  }, { urls: ["http://*/*"] });
}

let lastProxyError = 0;
(api.proxy.onProxyError ?? api.proxy.onError)?.addListener(() => {
  // The proxy failed a request (the browser went direct): re-check now rather than at the next alarm.
  if (Date.now() - lastProxyError < 1000) return;
  lastProxyError = Date.now();
  ready.then(refreshStatus);
});

// A response to a request that should have gone through the proxy, from another address than the proxy's: the
// browser fell back to direct (Chromium's PAC "PROXY …; DIRECT" does so silently). And one through the proxy
// while the badge says ERR: it is back. Either way the badge is stale: check now.
let lastMismatch = 0;
api.webRequest?.onResponseStarted.addListener((details) => {
  ready.then(() => {
    if (!details.ip || decide(details.url, state.config) !== "proxy") return;
    const proxyHost = state.config.proxy.replace(/:\d+$/, "").replace(/^\[|\]$/g, "");
    const ip = details.ip.replace(/^\[|\]$/g, "");
    const viaProxy = ip === proxyHost || (proxyHost === "localhost" && isLocalHost(ip));
    if (viaProxy === Boolean(state.ok) || Date.now() - lastMismatch < 1000) return;
    lastMismatch = Date.now();
    refreshStatus();
  });
}, { urls: ["http://*/*"] });

// Per tab: whether its largest transfers through the proxy switched to peers, and why (T, R, crowd, hint), from
// the proxy's /_swarm/requests record of each completed request (tabs[tabId] = transfers, largest first).
const tabs = new Map();

const started = new Map(); // requestId → when the browser started it (onCompleted's timeStamp is the end)

// Completed requests wait here a moment, so that a page's many requests cost one look at /_swarm/requests.
let queued = [];
let flushTimer = null;

function noteTransfer(details, startedAt) {
  if (details.type === "main_frame") tabs.delete(details.tabId); // a new page: a new list
  queued.push({ details, startedAt });
  flushTimer ??= setTimeout(flushTransfers, 250);
}

async function flushTransfers() {
  const batch = queued;
  queued = [];
  flushTimer = null;
  let records;
  try {
    records = await getJson("/_swarm/requests?limit=200");
  } catch {
    return; // the proxy went away: the global badge says so
  }
  const touched = new Set();
  for (const { details, startedAt } of batch) {
    const record = matchRecord(records, details.url, startedAt);
    if (!record) continue;
    tabs.set(details.tabId, addTransfer(tabs.get(details.tabId), transferOf(details.url, record)));
    touched.add(details.tabId);
  }
  await Promise.all([...touched].map(showTabBadge));
}

async function showTabBadge(tabId) {
  const badge = state.config.mode === "off" ? null : tabBadge(tabs.get(tabId));
  try {
    // null: the tab shows the global ON/OFF/ERR again.
    await api.action.setBadgeText({ tabId, text: badge ? badge.text : null });
  } catch {
    tabs.delete(tabId); // the tab is gone
    return;
  }
  if (badge) {
    await api.action.setBadgeBackgroundColor({ tabId, color: badge.color });
    await api.action.setTitle({ tabId, title: badge.title });
  } else {
    // Firefox takes null for "the global title again"; Chromium wants a string, and "" does the same there.
    try {
      await api.action.setTitle({ tabId, title: null });
    } catch {
      await api.action.setTitle({ tabId, title: "" }); // Chromium refuses null (synchronously)
    }
  }
}

api.webRequest?.onBeforeRequest.addListener((details) => {
  if (details.tabId < 0) return;
  if (started.size > 2000) started.delete(started.keys().next().value); // requests that never ended
  started.set(details.requestId, details.timeStamp);
}, { urls: ["http://*/*"] });
api.webRequest?.onErrorOccurred.addListener((details) => started.delete(details.requestId), { urls: ["http://*/*"] });

api.webRequest?.onCompleted.addListener((details) => {
  const startedAt = started.get(details.requestId) ?? details.timeStamp - 60_000;
  started.delete(details.requestId);
  if (details.tabId < 0) return;
  ready.then(() => {
    if (decide(details.url, state.config) === "proxy" && !details.fromCache) return noteTransfer(details, startedAt);
    if (details.type === "main_frame" && tabs.delete(details.tabId)) return showTabBadge(details.tabId);
    return undefined;
  });
}, { urls: ["http://*/*"] });

api.tabs?.onRemoved.addListener((tabId) => tabs.delete(tabId));

api.storage.onChanged.addListener((_changes, area) => {
  if (area !== "sync") return;
  ready.then(async () => {
    const before = JSON.stringify(state.config);
    await loadConfig();
    if (JSON.stringify(state.config) !== before) {
      await applyProxy();
      await refreshStatus(true);
    }
  });
});

api.runtime.onMessage.addListener((message, _sender, sendResponse) => {
  (async () => {
    await ready;
    switch (message?.type) {
      case "get":
        return message.refresh ? refreshStatus() : snapshot();
      case "set":
        return setConfig(message.config ?? {});
      default:
        throw new Error(`unknown message ${JSON.stringify(message?.type)}`);
    }
  })().then(sendResponse, (err) => sendResponse({ failure: String(err?.message ?? err) }));
  return true;
});

api.alarms.onAlarm.addListener((alarm) => {
  if (alarm.name === "status") ready.then(refreshStatus);
});
api.alarms.create("status", { periodInMinutes: 0.5 });

api.runtime.onInstalled.addListener(() => {
  api.contextMenus.create({ id: MENU_ID, title: "Download with swarmproxy", contexts: ["link"] }, () => {
    void api.runtime.lastError; // already there after an update
  });
});

async function downloadThroughProxy(url, suggested) {
  return api.downloads.download({
    url: fetchUrl(state.config.proxy, url),
    filename: downloadFileName(url, suggested),
    conflictAction: "uniquify",
  });
}

api.contextMenus.onClicked.addListener((info) => {
  if (info.menuItemId !== MENU_ID || !info.linkUrl) return;
  ready.then(() => downloadThroughProxy(info.linkUrl));
});

// An https:// download on a site that goes through the proxy: cancel the browser's own, ask the proxy's
// explicit fetch for it instead (it can swarm there without any certificate of ours), keeping the file name.
api.downloads.onCreated.addListener((item) => {
  ready.then(async () => {
    const url = item.finalUrl || item.url;
    if (!shouldFetchDownload(url, state.config)) return;
    try {
      await api.downloads.cancel(item.id);
      await api.downloads.erase({ id: item.id });
    } catch {
      return; // finished already (a tiny file): nothing to swarm
    }
    await downloadThroughProxy(url, item.filename);
  });
});

// For debugging from the background console (and for the browser tests): the same operations the popup uses.
globalThis.swarmproxy = { state, ready, refreshStatus, setConfig, decide: (url) => decide(url, state.config) };
