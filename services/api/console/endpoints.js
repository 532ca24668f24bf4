// The audit console's endpoints: those the reader sees (GET /v1/endpoints: a user its
// own, a domain admin its domain's, a superadmin all), one row each: where the proxy
// serves it, its revisions' traffic shares, its replicas by phase, the rolling update's
// progress, the autoscaling rule and its tokens (id and expiry; no secret is ever held).
// Read only, with the console's token; read again on "read again".

import { get, whenSignedIn } from "/console/read.js";

const $ = (selector) => document.querySelector(selector);

function cell(cls, text) {
  const td = document.createElement("td");
  td.className = cls;
  td.textContent = text; // from the log: text, never HTML
  return td;
}

function phases(ep) {
  const counts = new Map();
  for (const r of ep.replicas) {
    const key = r.in_rotation ? r.phase : `${r.phase} (out)`;
    counts.set(key, (counts.get(key) || 0) + 1);
  }
  const wanted = ep.targets.reduce((n, t) => n + t.replicas, 0);
  const had = [...counts].map(([phase, n]) => `${n} ${phase}`).join(", ");
  return `${wanted} wanted${had ? `: ${had}` : ""}`;
}

function rollout(ro) {
  return ro ? `to r${ro.revision}: ${ro.healthy}/${ro.replicas} healthy` : "";
}

function autoscale(rule) {
  return rule ? `${rule.metric} ${rule.down}–${rule.up}, ${rule.min_replicas}–${rule.max_replicas}` : "off";
}

function row(ep) {
  const tr = document.createElement("tr");
  tr.dataset.endpoint = ep.name;
  const traffic = ep.revisions.filter((r) => r.traffic > 0).map((r) => `r${r.revision} ${r.traffic} %`);
  const tokens = ep.tokens.map((t) => `${t.token_id} ${t.revoked ? "revoked" : `until ${t.expires_at.slice(0, 19)}`}`);
  tr.append(
    cell("name", ep.name), cell("owner", ep.owner), cell("path", `${ep.path} (${ep.public ? "public" : "token"})`),
    cell("traffic", traffic.join(", ")), cell("replicas", phases(ep)), cell("rollout", rollout(ep.rollout)),
    cell("autoscale", autoscale(ep.autoscale)), cell("tokens", tokens.join(", ")));
  return tr;
}

async function listEndpoints() {
  const page = await get("/v1/endpoints");
  $("#endpoint-table tbody").replaceChildren(...page.endpoints.map(row));
  $("#endpoints-state").textContent = page.endpoints.length ? "" : "no endpoints to show";
  $("#endpoint-table").dataset.seq = String(page.last_seq);
}

function said(error) {
  $("#endpoints-state").textContent = String(error.message || error);
}

$("#endpoints-again").addEventListener("click", () => listEndpoints().catch(said));
whenSignedIn(() => listEndpoints().catch(said));
