// Table-driven tests of extension/src/transfers.js (the per-tab badge), run by Node's own test runner.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  addTransfer, recordClosed, recordId, recordPath, tabBadge, transferOf, KEPT,
} from "../../extension/src/transfers.js";

const rec = (url, started, extra = {}) => ({
  url, started, bytes: 1000, transition: null, bytes_peers: 0, swarm_skipped: null, ...extra,
});

test("recordId: the proxy's Swarm-Request field, or null", async (t) => {
  const h = (name, value) => [{ name: "Content-Type", value: "text/html" }, { name, value }];
  const rows = [
    ["the proxy's form", h("Swarm-Request", "9f86d081884c7d65"), "9f86d081884c7d65"],
    ["any case, spaces around", h("swarm-request", " 9f86d081884c7d65 "), "9f86d081884c7d65"],
    ["absent (went direct)", h("Via", "1.1 swarmproxy"), null],
    ["a path in it", h("Swarm-Request", "../status"), null],
    ["a query in it", h("Swarm-Request", "9f86d081?limit=0"), null],
    ["not hex", h("Swarm-Request", "9f86d08z"), null],
    ["empty", h("Swarm-Request", ""), null],
    ["too long", h("Swarm-Request", "1".repeat(65)), null],
    ["no headers", undefined, null],
  ];
  for (const [name, headers, id] of rows) {
    await t.test(name, () => assert.equal(recordId(headers), id));
  }
  assert.equal(recordPath("9f86d081884c7d65"), "/_swarm/requests/9f86d081884c7d65");
});

test("recordClosed: the proxy has finished the record", () => {
  assert.equal(recordClosed(rec("http://a/", 1, { duration_s: 0.25 })), true);
  assert.equal(recordClosed(rec("http://a/", 1, { duration_s: 0 })), true);
  assert.equal(recordClosed(rec("http://a/", 1, { duration_s: null })), false);
  assert.equal(recordClosed(null), false);
});

test("addTransfer keeps one per URL, the largest first, at most KEPT", () => {
  let list = [];
  for (let i = 0; i < KEPT + 5; i++) list = addTransfer(list, { url: `http://x/${i}`, bytes: i, transition: null });
  assert.equal(list.length, KEPT);
  assert.equal(list[0].bytes, KEPT + 4);
  list = addTransfer(list, { url: `http://x/${KEPT + 4}`, bytes: 1, transition: "T" });
  assert.equal(list.filter((t) => t.url === `http://x/${KEPT + 4}`).length, 1);
});

test("tabBadge", async (t) => {
  const big = (n, extra) => transferOf(`http://s.example/file${n}.iso`, rec("", 0, { bytes: n * 1e6, ...extra }));
  const rows = [
    ["nothing", [], null],
    ["no switch", [big(5), big(3)], null],
    ["the largest switched, by R", [big(5, { transition: "R", bytes_peers: 4e6 }), big(3)], "R"],
    ["a smaller one switched", [big(5), big(3, { transition: "T" })], "T"],
    ["the largest switched decides", [big(2, { transition: "hint" }), big(9, { transition: "crowd" })], "crowd"],
    ["beyond the 5 largest: ignored", [big(9), big(8), big(7), big(6), big(5), big(1, { transition: "T" })], null],
  ];
  for (const [name, list, text] of rows) {
    await t.test(name, () => assert.equal(tabBadge(list)?.text ?? null, text));
  }
  const badge = tabBadge([big(5, { transition: "T", swarm_skipped: "dht-off" })]);
  assert.match(badge.title, /file5\.iso \(4\.8 MiB\): switched, T; no peer data \(dht-off\)/);
  assert.match(tabBadge([big(5, { transition: "R", bytes_peers: 2 * 1024 * 1024 })]).title, /2\.0 MiB from peers/);
});
