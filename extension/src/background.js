// The background of the extension: Chromium runs it as the service worker, Firefox as the background script
// (manifest.json names it both ways). It holds the configuration (storage.sync), routes requests (Chromium: a
// PAC script in proxy.settings; Firefox: proxy.onRequest), keeps the badge true to /_swarm/status, and sends
// HTTPS downloads on listed sites (and "Download with swarmproxy") through the proxy's explicit fetch.
import {
  decide, downloadFileName, fetchUrl, firefoxProxyInfo, generatePac, isLocalHost, normaliseConfig,
  shouldFetchDownload,
} from "./rules.js";
import { addTransfer, recordClosed, recordId, recordPath, tabBadge, transferOf } from "./transfers.js";

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
  status: null,       // its answer (counters since it started, and today's)
  error: null,        // why the last check failed
  checkedAt: null,
  control: null,      // proxy.settings' levelOfControl (Chromium; Firefox where it can be read)
  badge: "",
};

async function loadConfig() {
  state.config = normaliseConfig(await api.storage.sync.get(null));
}

// Who controls the browser's proxy setting (Chromium: the extension installed last that sets it wins, or a
// policy): read when the configuration is put into effect, at every status check, and whenever the setting
// changes (proxy.settings.onChange, below), so that another extension taking it, or letting go, shows at once.
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

// Another extension or a policy holds the proxy setting, so ours is not in effect: Chromium only, which routes by
// that setting. Firefox routes by proxy.onRequest, which wins over whatever proxy.settings holds (another
// extension with the private-browsing permission can set it; ours still reads its levelOfControl): no conflict.
function conflict() {
  if (FIREFOX) return false;
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
    const sites = state.config.mode === "all" ? "every site" : "listed sites";
    const version = state.status?.version ?? "";
    [text, color, title] = ["ON", "#2e7d32", `swarmproxy ${version} at ${state.config.proxy}: ${sites}`];
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

// Asks the proxy how it is (/_swarm/status), then sets the badge.
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
      state.ok = true;
      state.error = null;
    } catch (err) {
      state.ok = false;
      state.status = null;
      state.error = err?.name === "TimeoutError" ? "no answer" : String(err?.message ?? err);
    }
    await checkControl();
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

// Another extension took the proxy setting, or let go of it (disabled, removed, cleared): Chromium tells every
// extension with the proxy permission, each with its own levelOfControl; our own set() is told too, and changes
// no level. (Firefox's routing here is proxy.onRequest, which does not depend on proxy.settings.)
try {
  api.proxy.settings.onChange?.addListener((details) => {
    ready.then(() => {
      // fresh: a check under way may have read the level before the change.
      if ((details?.levelOfControl ?? null) !== state.control) return refreshStatus(true);
      return undefined;
    });
  });
} catch {
  // Firefox without private-browsing permission may refuse even the listener.
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
// the proxy's record of each completed response, which the response names in its Swarm-Request field and the
// admin API serves at /_swarm/requests/<id> (tabs[tabId] = transfers, largest first). A response without the
// field did not come through the proxy (the browser went direct) and is not shown.
const tabs = new Map();

const RECORD_LOOKUPS = 4; // at once: a page of many small files must not flood the proxy's admin API
const RECORD_TRIES = 3;   // a record still open (the browser was told first) is asked for again, this often

// Completed responses wait here a moment, so that a page's many requests are looked up together.
let queued = [];
let flushTimer = null;

function noteTransfer(details, id, tries = 0) {
  queued.push({ details, id, tries });
  flushTimer ??= setTimeout(flushTransfers, 250);
}

async function flushTransfers() {
  const batch = queued;
  queued = [];
  flushTimer = null;
  const touched = new Set();
  let next = 0;
  async function worker() {
    while (next < batch.length) {
      const { details, id, tries } = batch[next++];
      let record;
      try {
        record = await getJson(recordPath(id));
      } catch {
        continue; // gone from the proxy's history (404), or the proxy went away: the global badge says so
      }
      if (!recordClosed(record) && tries + 1 < RECORD_TRIES) {
        noteTransfer(details, id, tries + 1);
        continue;
      }
      tabs.set(details.tabId, addTransfer(tabs.get(details.tabId), transferOf(details.url, record)));
      touched.add(details.tabId);
    }
  }
  await Promise.all(Array.from({ length: Math.min(RECORD_LOOKUPS, batch.length) }, worker));
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

api.webRequest?.onCompleted.addListener((details) => {
  if (details.tabId < 0) return;
  // A new page: a new list (its own transfers come after its main frame's response).
  if (details.type === "main_frame" && tabs.delete(details.tabId)) ready.then(() => showTabBadge(details.tabId));
  const id = details.fromCache ? null : recordId(details.responseHeaders);
  if (id) ready.then(() => noteTransfer(details, id));
}, { urls: ["http://*/*"] }, ["responseHeaders"]);

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

// The proxy refuses what a browser sends on a web page's behalf (Sec-Fetch-Site: cross-site), and Chromium marks a
// download an extension starts that way too; this field, which no page can send, says the request is ours.
const CLIENT_FIELD = { name: "Swarm-Client", value: "extension" };

async function downloadThroughProxy(url, suggested) {
  return api.downloads.download({
    url: fetchUrl(state.config.proxy, url),
    filename: downloadFileName(url, suggested),
    conflictAction: "uniquify",
    headers: [CLIENT_FIELD],
  });
}

// "Download with swarmproxy" on a link: whatever the mode and the lists say (the user asked for it), the link's
// file through the proxy's explicit fetch. Resolves to the download's id (undefined for another menu item).
async function menuClicked(info) {
  if (info?.menuItemId !== MENU_ID || !info.linkUrl) return undefined;
  await ready;
  return downloadThroughProxy(info.linkUrl);
}

api.contextMenus.onClicked.addListener((info) => {
  menuClicked(info);
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

// For debugging from the background console (and for the browser tests): the same operations the popup uses, and
// what a click on the context menu's item does (no browser lets a test open its native menu).
globalThis.swarmproxy = {
  state, ready, refreshStatus, setConfig, menuClicked, MENU_ID, decide: (url) => decide(url, state.config),
};
