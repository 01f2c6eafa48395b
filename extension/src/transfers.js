// What the per-tab badge says: whether the tab's largest transfers through the proxy switched to peers and why.
// Pure functions (no browser API), tested under Node (tests/extension/transfers.test.mjs); background.js feeds
// them the tab's completed requests and the proxy's /_swarm/requests records.

export const LARGEST = 5; // transfers a tab's badge looks at, by size
export const KEPT = 20;   // transfers kept per tab

// The proxy's record of a request the browser completed: the newest record of that URL that started no earlier
// than `startedMs` (the browser's own start time, less `slackMs` for clocks read at different moments), or null.
// A URL the proxy shows redacted (credentials) matches nothing: such a URL is never swarmed anyway.
export function matchRecord(records, url, startedMs, slackMs = 2000) {
  let found = null;
  for (const record of Array.isArray(records) ? records : []) {
    if (!record || record.url !== url) continue;
    if (typeof record.started === "number" && record.started * 1000 < startedMs - slackMs) continue;
    if (!found || record.started > found.started) found = record;
  }
  return found;
}

// A tab's transfer, from the browser's completed request and the proxy's record of it.
export function transferOf(url, record) {
  return {
    url,
    bytes: record?.bytes ?? 0,
    transition: record?.transition ?? null,
    bytesPeers: record?.bytes_peers ?? 0,
    swarmSkipped: record?.swarm_skipped ?? null,
  };
}

// Adds a transfer to a tab's list (a new one for the same URL replaces the old), keeping the KEPT largest.
export function addTransfer(list, transfer) {
  const next = (list ?? []).filter((t) => t.url !== transfer.url);
  next.push(transfer);
  next.sort((a, b) => b.bytes - a.bytes);
  return next.slice(0, KEPT);
}

function size(n) {
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

function shortName(url) {
  try {
    const u = new URL(url);
    return u.pathname.split("/").pop() || u.host;
  } catch {
    return url;
  }
}

// The tab's badge: null (show the global ON/OFF/ERR) when none of its LARGEST transfers switched; else the
// cause of the largest that did ("T" first byte too late, "R" too slow, "crowd", "hint", ...), and a title
// naming each of those transfers, how much came from peers, and why peers were not used if they were not.
export function tabBadge(list) {
  const largest = [...(list ?? [])].sort((a, b) => b.bytes - a.bytes).slice(0, LARGEST);
  const switched = largest.filter((t) => t.transition);
  if (!switched.length) return null;
  const lines = switched.map((t) => {
    const peers = t.bytesPeers ? `${size(t.bytesPeers)} from peers` : `no peer data${t.swarmSkipped ? ` (${t.swarmSkipped})` : ""}`;
    return `${shortName(t.url)} (${size(t.bytes)}): switched, ${t.transition}; ${peers}`;
  });
  return {
    text: switched[0].transition,
    color: switched.some((t) => t.bytesPeers > 0) ? "#1565c0" : "#6d4c41",
    title: `swarmproxy, this tab:\n${lines.join("\n")}`,
  };
}
