// What the per-tab badge says: whether the tab's largest transfers through the proxy switched to peers and why.
// Pure functions (no browser API), tested under Node (tests/extension/transfers.test.mjs); background.js feeds
// them the tab's completed requests and the proxy's record of each (/_swarm/requests/<id>, the id from the
// response's Swarm-Request field).

export const LARGEST = 5; // transfers a tab's badge looks at, by size
export const KEPT = 20;   // transfers kept per tab

// The id of the proxy's record of a response (its `Swarm-Request` field, which the proxy adds to every response
// it relays), from webRequest's responseHeaders; null when there is none (the response did not come through
// the proxy) or it is not of the proxy's form (hex digits), so that nothing odd is put into an admin path.
export const RECORD_FIELD = "swarm-request";

export function recordId(responseHeaders) {
  for (const header of Array.isArray(responseHeaders) ? responseHeaders : []) {
    if (String(header?.name).toLowerCase() !== RECORD_FIELD) continue;
    const value = String(header.value ?? "").trim();
    return /^[0-9a-f]{1,64}$/.test(value) ? value : null;
  }
  return null;
}

// Where the proxy's admin API serves that record.
export function recordPath(id) {
  return `/_swarm/requests/${id}`;
}

// Whether the proxy has closed the record: it closes it just after the response's last byte, which the browser
// may report complete a moment before.
export function recordClosed(record) {
  return typeof record?.duration_s === "number";
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
    const why = t.swarmSkipped ? ` (${t.swarmSkipped})` : "";
    const peers = t.bytesPeers ? `${size(t.bytesPeers)} from peers` : `no peer data${why}`;
    return `${shortName(t.url)} (${size(t.bytes)}): switched, ${t.transition}; ${peers}`;
  });
  return {
    text: switched[0].transition,
    color: switched.some((t) => t.bytesPeers > 0) ? "#1565c0" : "#6d4c41",
    title: `swarmproxy, this tab:\n${lines.join("\n")}`,
  };
}
