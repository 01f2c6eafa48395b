// Table-driven tests of extension/src/rules.js, run by Node's own test runner:
//   node --test tests/extension/   (tests/extension/test_rules_node.py runs this under pytest)
// The PAC script is evaluated in a vm context and must agree with decide() on every row.
import { test } from "node:test";
import assert from "node:assert/strict";
import vm from "node:vm";
import {
  decide, downloadFileName, fetchUrl, firefoxProxyInfo, generatePac, isFetchUrl, normaliseConfig,
  normalisePattern, parsePatterns, parseProxyAddress, shouldFetchDownload, statusPageUrl,
} from "../../extension/src/rules.js";

const PATTERNS = [
  // [input, normal form or null when invalid]
  ["example.com", "example.com"],
  ["  Example.COM.  ", "example.com"],
  ["*.example.com", "*.example.com"],
  ["*.Example.com.", "*.example.com"],
  ["https://Downloads.Example.com:8443/a/b?c", "downloads.example.com"],
  ["example.com/path", "example.com"],
  ["192.0.2.7", "192.0.2.7"],
  ["[2001:DB8::1]", "2001:db8::1"],
  ["http://[2001:db8::1]:8080/x", "2001:db8::1"],
  ["bücher.de", "xn--bcher-kva.de"],
  ["*.bücher.de", "*.xn--bcher-kva.de"],
  ["my_host.lan", "my_host.lan"],
  ["", null],
  ["*", null],
  ["*.", null],
  ["ex ample.com", null],
  ["-bad.com", null],
  ["bad-.com", null],
  ["a..b", null],
  ["*.192.0.2.7", null],
  ["300.1.1.1", null],
  ["foo*.com", null],
  ["http://", null],
];

test("normalisePattern", async (t) => {
  for (const [input, expected] of PATTERNS) {
    await t.test(JSON.stringify(input), () => {
      if (expected === null) assert.throws(() => normalisePattern(input));
      else assert.equal(normalisePattern(input), expected);
    });
  }
});

test("parsePatterns: text with comments, duplicates, errors", () => {
  const { patterns, errors } = parsePatterns(
    "# mirrors\nb.example, a.example  a.example\n*.cdn.example # all of it\nbad^host\n");
  assert.deepEqual(patterns, ["*.cdn.example", "a.example", "b.example"]);
  assert.equal(errors.length, 1);
  assert.match(errors[0], /bad\^host/);
  assert.deepEqual(parsePatterns(["x.example", "X.example."]).patterns, ["x.example"]);
  assert.deepEqual(parsePatterns(undefined), { patterns: [], errors: [] });
});

test("parseProxyAddress", async (t) => {
  const rows = [
    ["127.0.0.1:8080", { host: "127.0.0.1", port: 8080 }],
    ["http://localhost:3128/", { host: "localhost", port: 3128 }],
    ["[::1]:8080", { host: "::1", port: 8080 }],
    ["127.0.0.1", null],
    ["127.0.0.1:0", null],
    ["127.0.0.1:70000", null],
    ["::1:8080", null],
    ["", null],
  ];
  for (const [input, expected] of rows) {
    await t.test(JSON.stringify(input), () => {
      if (expected === null) assert.throws(() => parseProxyAddress(input));
      else assert.deepEqual(parseProxyAddress(input), expected);
    });
  }
});

test("normaliseConfig fills defaults and drops what is invalid", () => {
  assert.deepEqual(normaliseConfig(undefined), { mode: "listed", proxy: "127.0.0.1:8080", rules: [], exclude: [] });
  assert.deepEqual(
    normaliseConfig({ mode: "bogus", proxy: "nope", rules: ["B.example", "bad host"], exclude: "x.example" }),
    { mode: "listed", proxy: "127.0.0.1:8080", rules: ["b.example"], exclude: ["x.example"] });
  assert.equal(normaliseConfig({ proxy: "[::1]:9" }).proxy, "[::1]:9");
});

const LISTED = {
  mode: "listed", proxy: "127.0.0.1:8080", rules: ["example.com", "*.cdn.example", "192.0.2.7", "[2001:db8::1]"],
  exclude: ["private.cdn.example"],
};
const ALL = { mode: "all", proxy: "127.0.0.1:8080", rules: [], exclude: ["*.bank.example", "intranet"] };
const OFF = { ...LISTED, mode: "off" };

// [config, url, expected]
const DECISIONS = [
  [LISTED, "http://example.com/file.iso", "proxy"],
  [LISTED, "http://EXAMPLE.com./file.iso", "proxy"],
  [LISTED, "http://example.com:8000/x", "proxy"],
  [LISTED, "http://www.example.com/", "direct"],       // exact names only
  [LISTED, "http://notexample.com/", "direct"],
  [LISTED, "https://example.com/file.iso", "direct"], // https: never the proxy (the fetch endpoint is for that)
  [LISTED, "ftp://example.com/file.iso", "direct"],
  [LISTED, "ws://example.com/socket", "direct"],
  [LISTED, "http://a.cdn.example/f", "proxy"],
  [LISTED, "http://a.b.cdn.example/f", "proxy"],
  [LISTED, "http://cdn.example/f", "direct"],          // *.d is every name under d, not d
  [LISTED, "http://xcdn.example/f", "direct"],
  [LISTED, "http://private.cdn.example/f", "direct"],  // exclude wins
  [LISTED, "http://192.0.2.7/f", "proxy"],
  [LISTED, "http://192.0.2.70/f", "direct"],
  [LISTED, "http://[2001:db8::1]:8080/f", "proxy"],
  [LISTED, "http://localhost/f", "direct"],
  [LISTED, "http://127.0.0.1:8080/_swarm/status", "direct"],
  [LISTED, "not a url", "direct"],
  [OFF, "http://example.com/file.iso", "direct"],
  [ALL, "http://anything.example/f", "proxy"],
  [ALL, "http://192.0.2.99/f", "proxy"],
  [ALL, "http://www.bank.example/f", "direct"],
  [ALL, "http://bank.example/f", "proxy"],
  [ALL, "http://intranet/f", "direct"],
  [ALL, "http://127.0.0.5/f", "direct"],
  [ALL, "http://[::1]:8080/f", "direct"],
  [ALL, "http://dev.localhost/f", "direct"],
  [ALL, "https://anything.example/f", "direct"],
];

function pacFor(config) {
  const context = vm.createContext({});
  vm.runInContext(generatePac(config), context);
  return context.FindProxyForURL;
}

// Chromium gives FindProxyForURL the URL and its host (IPv6 without brackets); https URLs are stripped to
// scheme://host/ before the PAC sees them.
function pacHost(url) {
  const h = new URL(url).hostname;
  return h.startsWith("[") ? h.slice(1, -1) : h;
}

test("decide, the PAC script and Firefox's ProxyInfo agree", async (t) => {
  for (const [config, url, expected] of DECISIONS) {
    await t.test(`${config.mode} ${url}`, () => {
      assert.equal(decide(url, config), expected);
      const info = firefoxProxyInfo(url, config);
      if (expected === "proxy") {
        assert.deepEqual(info, [
          { type: "http", host: "127.0.0.1", port: 8080, failoverTimeout: 2 }, { type: "direct" },
        ]);
      } else {
        assert.deepEqual(info, { type: "direct" });
      }
      let host;
      try {
        host = pacHost(url);
      } catch {
        return; // not a URL: the browser never asks
      }
      assert.equal(pacFor(config)(url, host), expected === "proxy" ? "PROXY 127.0.0.1:8080; DIRECT" : "DIRECT");
    });
  }
});

test("the PAC falls back to DIRECT and names the configured proxy", () => {
  const pac = generatePac({ ...LISTED, proxy: "127.0.0.1:38123" });
  assert.match(pac, /PROXY 127\.0\.0\.1:38123; DIRECT/);
  assert.equal(pacFor({ ...LISTED, proxy: "[::1]:9000" })("http://example.com/", "example.com"),
    "PROXY [::1]:9000; DIRECT");
  // A hostile pattern cannot break out of the PAC's JSON (it is rejected before it gets there anyway).
  assert.doesNotThrow(() => pacFor({ mode: "listed", rules: ["x.example\"; alert(1); //"] }));
});

test("fetchUrl, isFetchUrl", () => {
  const f = fetchUrl("127.0.0.1:8080", "https://example.com/a b/file.iso?x=1&y=2");
  assert.equal(f,
    "http://127.0.0.1:8080/_swarm/fetch?url=https%3A%2F%2Fexample.com%2Fa%20b%2Ffile.iso%3Fx%3D1%26y%3D2");
  assert.equal(new URL(f).searchParams.get("url"), "https://example.com/a b/file.iso?x=1&y=2");
  assert.ok(isFetchUrl("127.0.0.1:8080", f));
  assert.ok(!isFetchUrl("127.0.0.1:9090", f));
  assert.ok(!isFetchUrl("127.0.0.1:8080", "http://127.0.0.1:8080/_swarm/status"));
});

test("shouldFetchDownload", async (t) => {
  const rows = [
    [LISTED, "https://example.com/file.iso", true],
    [LISTED, "https://a.cdn.example/file.iso", true],
    [LISTED, "https://private.cdn.example/file.iso", false],
    [LISTED, "https://other.example/file.iso", false],
    [LISTED, "http://example.com/file.iso", false],  // plain http goes through the proxy already
    [OFF, "https://example.com/file.iso", false],
    [ALL, "https://other.example/file.iso", true],
    [ALL, "https://127.0.0.1/file.iso", false],
    [LISTED, "http://127.0.0.1:8080/_swarm/fetch?url=https%3A%2F%2Fexample.com%2Ff", false],
    [LISTED, "blob:https://example.com/uuid", false],
    [LISTED, "data:text/plain,hi", false],
  ];
  for (const [config, url, expected] of rows) {
    await t.test(`${config.mode} ${url}`, () => assert.equal(shouldFetchDownload(url, config), expected));
  }
});

test("downloadFileName", async (t) => {
  const rows = [
    ["https://example.com/dir/file.iso", undefined, "file.iso"],
    ["https://example.com/dir/my%20file.tar.gz?x=1", undefined, "my file.tar.gz"],
    ["https://example.com/", undefined, "download"],
    ["https://example.com/a/..%2F..%2Fetc%2Fpasswd", undefined, "_.._etc_passwd"],
    ["https://example.com/x", "/home/u/Downloads/chosen.bin", "chosen.bin"],
    ["https://example.com/%E2%82%AC.txt", undefined, "€.txt"],
    ["https://example.com/bad%ZZ", undefined, "download"],
    ["https://example.com/...", undefined, "download"],
  ];
  for (const [url, suggested, expected] of rows) {
    await t.test(`${url} ${suggested ?? ""}`, () => assert.equal(downloadFileName(url, suggested), expected));
  }
});

test("statusPageUrl: the popup's link to the proxy's status page", () => {
  assert.equal(statusPageUrl("127.0.0.1:8080"), "http://127.0.0.1:8080/_swarm/");
  assert.equal(statusPageUrl(" http://LOCALHOST:9000/ "), "http://localhost:9000/_swarm/");
  assert.equal(statusPageUrl("[::1]:8080"), "http://[::1]:8080/_swarm/");
  assert.throws(() => statusPageUrl("javascript:alert(1)"));
});
