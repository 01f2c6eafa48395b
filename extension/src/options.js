// The options page: the proxy's address, the listed sites and the exclude list, kept in storage.sync through
// the background (which puts them into effect before it answers).
import { parsePatterns, parseProxyAddress, formatProxyAddress } from "./rules.js";

const api = globalThis.browser ?? globalThis.chrome;
const $ = (id) => document.getElementById(id);

function send(message) {
  return api.runtime.sendMessage(message).then((answer) => {
    if (answer?.failure) throw new Error(answer.failure);
    return answer;
  });
}

function show(s) {
  $("badge").textContent = s.badge || "…";
  $("badge").className = `pill ${s.badge}`;
  $("conflict").hidden = !s.conflict;
}

function fill(s) {
  $("proxy").value = s.config.proxy;
  $("rules").value = s.config.rules.join("\n");
  $("exclude").value = s.config.exclude.join("\n");
  show(s);
}

function report(errors) {
  const list = $("errors");
  list.replaceChildren(...errors.map((text) => Object.assign(document.createElement("li"), { textContent: text })));
  list.hidden = errors.length === 0;
}

document.addEventListener("DOMContentLoaded", () => {
  send({ type: "get" }).then(fill, (err) => report([String(err.message ?? err)]));
  $("form").addEventListener("submit", async (event) => {
    event.preventDefault();
    $("saved").textContent = "";
    $("saved").dataset.state = "";
    const errors = [];
    let proxy = null;
    try {
      proxy = formatProxyAddress(parseProxyAddress($("proxy").value));
    } catch (err) {
      errors.push(err.message);
    }
    const rules = parsePatterns($("rules").value);
    const exclude = parsePatterns($("exclude").value);
    errors.push(...rules.errors.map((e) => `Listed sites: ${e}`), ...exclude.errors.map((e) => `Never: ${e}`));
    report(errors);
    if (errors.length) return; // nothing half-saved: fix and save again
    try {
      const s = await send({ type: "set", config: { proxy, rules: rules.patterns, exclude: exclude.patterns } });
      fill(s);
      $("saved").textContent = `Saved; ${s.ok ? "swarmproxy answers" : `swarmproxy does not answer (${s.error})`}.`;
      $("saved").dataset.state = "saved";
    } catch (err) {
      report([String(err.message ?? err)]);
    }
  });
});
