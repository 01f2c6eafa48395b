// The one rules module of the extension: pure functions, no browser API, so that Node's test runner
// (tests/extension/rules.test.mjs) checks exactly what Chromium's PAC script and Firefox's proxy.onRequest run.
//
// A configuration is {mode, proxy, rules, exclude}:
//   mode     "off" (never the proxy), "listed" (the hosts in `rules`), "all" (every host)
//   proxy    the proxy's address, "host:port" (default 127.0.0.1:8080)
//   rules    host patterns sent through the proxy in "listed" mode
//   exclude  host patterns never sent through the proxy (wins over `rules` and over "all")
// A pattern is a host name or IP literal ("example.com", "192.0.2.7", "[2001:db8::1]"), or "*." and a domain:
// "*.example.com" is every name under example.com, not example.com itself (as swarmproxy's --mitm-hosts).
// A pasted URL ("https://example.com/x") stands for its host.
//
// Only plain http:// goes through the proxy: https:// would be a blind CONNECT tunnel there, so nothing to
// swarm and one more thing that can fail. HTTPS downloads on listed sites use the explicit fetch instead
// (fetchUrl). This machine's own names (localhost, 127.0.0.0/8, ::1) always go direct.

export const MODES = ["off", "listed", "all"];
export const DEFAULT_PROXY = "127.0.0.1:8080";
export const DEFAULTS = Object.freeze({ mode: "listed", proxy: DEFAULT_PROXY, rules: [], exclude: [] });
export const FETCH_PATH = "/_swarm/fetch";

const LABEL = /^(?!-)[a-z0-9_-]{1,63}(?<!-)$/;
const IPV4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;

// Whether `host` (lower case, IPv6 without brackets) is matched by one of `patterns` (normalised by
// normalisePattern). Self-contained: generatePac embeds its source in the PAC script.
export function hostMatches(host, patterns) {
  for (var i = 0; i < patterns.length; i++) {
    var p = patterns[i];
    if (p.indexOf("*.") === 0) {
      var suffix = p.substring(1);
      if (host.length > suffix.length && host.substring(host.length - suffix.length) === suffix) return true;
    } else if (host === p) {
      return true;
    }
  }
  return false;
}

// Whether `host` is this machine: always direct (the proxy itself, its admin API, local development servers).
// Self-contained: embedded in the PAC script.
export function isLocalHost(host) {
  if (host === "localhost" || host === "::1" || host === "0:0:0:0:0:0:0:1") return true;
  if (host.length > 10 && host.substring(host.length - 10) === ".localhost") return true;
  return /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

// "proxy" or "direct" for a request with this scheme ("http", ...) and host (lower case, no brackets), under
// the normalised configuration `c`. Self-contained but for hostMatches and isLocalHost: embedded in the PAC.
export function decideHost(scheme, host, c) {
  if (c.mode !== "listed" && c.mode !== "all") return "direct";
  if (scheme !== "http") return "direct";
  if (host.charAt(0) === "[") host = host.substring(1, host.length - 1);
  host = host.toLowerCase();
  if (host.charAt(host.length - 1) === ".") host = host.substring(0, host.length - 1);
  if (isLocalHost(host)) return "direct";
  if (hostMatches(host, c.exclude)) return "direct";
  if (c.mode === "all") return "proxy";
  return hostMatches(host, c.rules) ? "proxy" : "direct";
}

function bareHost(host) {
  let h = host.trim().toLowerCase();
  if (h.startsWith("[") && h.endsWith("]")) h = h.slice(1, -1);
  if (h.endsWith(".")) h = h.slice(0, -1);
  return h;
}

function validHost(h) {
  if (h.includes(":")) return /^[0-9a-f:.]+$/.test(h) && h.split(":").length >= 3; // IPv6 literal
  const v4 = IPV4.exec(h);
  if (v4) return v4.slice(1).every((n) => Number(n) <= 255);
  return h.length <= 253 && h.split(".").every((label) => LABEL.test(label));
}

// The normal form of one pattern, or throws an Error saying why it is not one.
export function normalisePattern(text) {
  let t = String(text).trim();
  if (!t) throw new Error("empty pattern");
  if (t.includes("://")) {
    let url;
    try {
      url = new URL(t);
    } catch {
      throw new Error(`${JSON.stringify(t)}: not a URL`);
    }
    t = url.hostname;
  } else if (t.includes("/")) {
    t = t.slice(0, t.indexOf("/"));
  }
  const wildcard = t.startsWith("*.");
  let host = bareHost(wildcard ? t.slice(2) : t);
  if (!host.includes(":") && /[^\x00-\x7f]/.test(host)) {
    // An international name: the browser sends its ASCII (punycode) form.
    try {
      host = new URL(`http://${host}/`).hostname;
    } catch {
      throw new Error(`${JSON.stringify(t)}: not a host name`);
    }
  }
  if (!validHost(host)) {
    throw new Error(`${JSON.stringify(String(text).trim())}: not a host name, IP address or *.domain`);
  }
  if (wildcard && (host.includes(":") || IPV4.test(host))) {
    throw new Error(`${JSON.stringify(t)}: "*." needs a domain name`);
  }
  return wildcard ? `*.${host}` : host;
}

// Patterns from a list or from text (one per line, or separated by commas or spaces; "#" starts a comment):
// {patterns: sorted unique normal forms, errors: ["why", ...]}.
export function parsePatterns(input) {
  const items = Array.isArray(input)
    ? input
    : String(input ?? "").split("\n").map((line) => line.replace(/#.*/, "")).join(" ").split(/[\s,]+/);
  const patterns = new Set();
  const errors = [];
  for (const item of items) {
    if (!String(item ?? "").trim()) continue;
    try {
      patterns.add(normalisePattern(item));
    } catch (err) {
      errors.push(err.message);
    }
  }
  return { patterns: [...patterns].sort(), errors };
}

// "host:port" as {host, port} (host without brackets), or throws saying why not.
export function parseProxyAddress(text) {
  const t = String(text ?? "").trim().replace(/^http:\/\//i, "").replace(/\/$/, "");
  const m = /^(\[[0-9a-fA-F:.]+\]|[^:\[\]\s/]+):(\d{1,5})$/.exec(t);
  if (!m) throw new Error(`${JSON.stringify(t)}: the proxy's address is host:port, e.g. ${DEFAULT_PROXY}`);
  const port = Number(m[2]);
  const host = bareHost(m[1]);
  if (port < 1 || port > 65535 || !validHost(host)) throw new Error(`${JSON.stringify(t)}: not a valid host:port`);
  return { host, port };
}

export function formatProxyAddress({ host, port }) {
  return host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
}

// The configuration as stored (storage.sync), made whole and valid: unknown modes become the default,
// invalid patterns are dropped (the options page reports them before saving), a bad address the default.
export function normaliseConfig(raw) {
  const r = raw && typeof raw === "object" ? raw : {};
  let proxy = DEFAULT_PROXY;
  try {
    proxy = formatProxyAddress(parseProxyAddress(r.proxy ?? DEFAULT_PROXY));
  } catch {
    proxy = DEFAULT_PROXY;
  }
  return {
    mode: MODES.includes(r.mode) ? r.mode : DEFAULTS.mode,
    proxy,
    rules: parsePatterns(r.rules ?? []).patterns,
    exclude: parsePatterns(r.exclude ?? []).patterns,
  };
}

// "proxy" or "direct" for a URL (string or URL) under a configuration (normalised here).
export function decide(url, config) {
  let u;
  try {
    u = url instanceof URL ? url : new URL(url);
  } catch {
    return "direct";
  }
  return decideHost(u.protocol.replace(/:$/, ""), u.hostname, normaliseConfig(config));
}

// Firefox's proxy.onRequest answer: the proxy, then direct if it does not answer.
export function firefoxProxyInfo(url, config) {
  const c = normaliseConfig(config);
  if (decide(url, c) !== "proxy") return { type: "direct" };
  const { host, port } = parseProxyAddress(c.proxy);
  return [{ type: "http", host, port, failoverTimeout: 2 }, { type: "direct" }];
}

// The PAC script for Chromium's proxy.settings: the same decideHost, hostMatches and isLocalHost, with the
// configuration inlined. A proxy that does not answer falls back to DIRECT.
export function generatePac(config) {
  const c = normaliseConfig(config);
  const data = JSON.stringify({ mode: c.mode, rules: c.rules, exclude: c.exclude });
  return [
    "// Generated by the swarmproxy extension from its rules (extension/src/rules.js); do not edit.",
    `var SWARMPROXY_CONFIG = ${data};`,
    `var SWARMPROXY_ROUTE = ${JSON.stringify(`PROXY ${c.proxy}; DIRECT`)};`,
    hostMatches.toString(),
    isLocalHost.toString(),
    decideHost.toString(),
    "function FindProxyForURL(url, host) {",
    "  var scheme = url.substring(0, url.indexOf(':')).toLowerCase();",
    "  return decideHost(scheme, host, SWARMPROXY_CONFIG) === 'proxy' ? SWARMPROXY_ROUTE : 'DIRECT';",
    "}",
    "",
  ].join("\n");
}

// The proxy's explicit fetch URL for `url`: the proxy downloads it (https too) and can swarm it.
export function fetchUrl(proxy, url) {
  return `http://${formatProxyAddress(parseProxyAddress(proxy))}${FETCH_PATH}?url=${encodeURIComponent(String(url))}`;
}

// The proxy's live status page (issue 41), which the popup links to.
export function statusPageUrl(proxy) {
  return `http://${formatProxyAddress(parseProxyAddress(proxy))}/_swarm/`;
}

// Whether `url` is already a fetch through the proxy at `proxy` (so a download of it is never re-routed).
export function isFetchUrl(proxy, url) {
  try {
    const u = new URL(url);
    const { host, port } = parseProxyAddress(proxy);
    return u.protocol === "http:" && bareHost(u.hostname) === host && Number(u.port || 80) === port
      && u.pathname === FETCH_PATH;
  } catch {
    return false;
  }
}

// Whether a browser download of `url` should go through the explicit fetch instead: an https:// file on a
// site this configuration sends to the proxy (what plain http:// gets through the proxy already).
export function shouldFetchDownload(url, config) {
  const c = normaliseConfig(config);
  let u;
  try {
    u = new URL(url);
  } catch {
    return false;
  }
  if (u.protocol !== "https:" || isFetchUrl(c.proxy, url)) return false;
  return decideHost("http", u.hostname, c) === "proxy";
}

// The file name a download of `url` keeps when it goes through the fetch endpoint (whose own path would name
// it "fetch"): `suggested` (what the browser had chosen) if given, else the URL path's last segment.
export function downloadFileName(url, suggested) {
  let name = String(suggested ?? "").split(/[/\\]/).pop();
  if (!name) {
    try {
      const segment = new URL(url).pathname.split("/").pop();
      name = decodeURIComponent(segment);
    } catch {
      name = "";
    }
  }
  name = name.replace(/[\x00-\x1f\x7f<>:"/\\|?*]/g, "_").replace(/^[.\s]+|[.\s]+$/g, "");
  return name || "download";
}
