// The Serving page: the viewer's endpoints (GET /v1/endpoints, as `fgpu serve ls`: a user
// its own, a domain admin its domain's) and one endpoint (#/serving/NAME, GET
// /v1/endpoints/{name}, as `fgpu serve info`): its path through the proxy, revisions with
// their traffic share, replicas with phase and rotation, the rolling update's progress,
// the autoscaling rule and the tokens (id and expiry: the read API never holds a secret).
// Read again when the event stream brings news of endpoints or their replicas.
// Its writes (ui_serving.py) are the user's own serve requests, as `fgpu serve scale`,
// `rollback --to`, `traffic`, `autoscale` and `token create|revoke` send them, answered as the serving actor judged them:
// a new token is shown once, from the answer, and is nowhere else.

const $ = (selector) => document.querySelector(selector);
// typed: the new traffic shares typed by revision, kept while the page is read again.
const page = { ctx: null, name: null, shown: false, typed: new Map() };

// The events after which the page is read again (beside the sessions', its replicas').
export const SERVING_EVENTS = [
  "endpoint.created.v1", "endpoint.revision-added.v1", "endpoint.replicas-set.v1",
  "endpoint.removed.v1", "endpoint.token-created.v1", "endpoint.token-revoked.v1",
  "endpoint.rollout-started.v1", "endpoint.rollout-ended.v1", "endpoint.autoscale-set.v1",
  "replica.changed.v1", "replica.rotation.v1",
];

function time(iso) {
  return iso ? iso.replace("T", " ").replace(/\.\d+/, "").replace(/(Z|\+00:00)$/, "") : "";
}

function problem(e) {
  const ctx = page.ctx;
  if (e instanceof ctx.Unauthorized) ctx.signedOut(e.message);
  else $("#serving-problem").textContent = e.message;
}

function shares(ep) {
  return ep.revisions.filter((r) => r.traffic > 0).map((r) => `r${r.revision} ${r.traffic} %`)
    .join(", ");
}

function replicaCount(ep) {
  const serving = ep.replicas.filter((r) => r.in_rotation && r.phase === "healthy").length;
  const wanted = ep.targets.reduce((n, t) => n + t.replicas, 0);
  return `${serving} serving of ${wanted} wanted (${ep.replicas.length} replicas in all)`;
}

function autoscale(rule) {
  if (!rule) return "off";
  return `${rule.metric} up > ${rule.up}, down < ${rule.down}, ±${rule.step}, ` +
    `${rule.min_replicas}–${rule.max_replicas} replicas, cooldown ${rule.cooldown_s} s`;
}

function endpointRow(ep) {
  const { el } = page.ctx;
  return el("tr", { "data-endpoint": ep.name },
    el("td", { class: "name" }, el("a", { href: `#/serving/${encodeURIComponent(ep.name)}` }, ep.name)),
    el("td", { class: "path" }, ep.path),
    el("td", { class: "access" }, ep.public ? "public" : "token"),
    el("td", { class: "traffic" }, shares(ep)),
    el("td", { class: "replicas" }, replicaCount(ep)),
    el("td", { class: "autoscale" }, autoscale(ep.autoscale)));
}

async function loadList() {
  const found = await page.ctx.call("GET", "/v1/endpoints");
  $("#endpoint-table tbody").replaceChildren(...found.endpoints.map(endpointRow));
  $("#serving-empty").hidden = found.endpoints.length > 0;
  document.body.dataset.endpointsListed = String(found.last_seq);
}

function revisionRow(r, wanted) {
  const { el } = page.ctx;
  return el("tr", { "data-revision": String(r.revision) },
    el("td", {}, `r${r.revision}`), el("td", { class: "image" }, r.image),
    el("td", {}, r.slots.fgpu), el("td", {}, r.slots.cpu), el("td", {}, r.health_path || ""),
    // Which variable holds which of the owner's secrets: names only, as the API has them.
    el("td", { class: "secrets" }, (r.secrets || []).map((x) => `${x.variable}=${x.secret}`).join(", ")),
    el("td", { class: "traffic" }, `${r.traffic} %`), el("td", {}, String(wanted.get(r.revision) || 0)),
    el("td", {}, el("input", {
      type: "number", min: "0", max: "100", step: "1", class: "share", "data-share": String(r.revision),
      value: page.typed.get(r.revision) ?? String(r.traffic),
      oninput: (e) => page.typed.set(r.revision, e.target.value),
    })),
    // Any revision not taking all the traffic may take it: a rollback, or a roll forward.
    el("td", {}, r.traffic === 100 ? null : el("button",
      { type: "button", class: "point", "data-point": String(r.revision), onclick: () => point(r.revision) },
      `move all traffic to r${r.revision}`)));
}

function replicaRow(r) {
  const { el } = page.ctx;
  return el("tr", { "data-replica": r.session_id, "data-phase": r.phase },
    el("td", { class: "sid" }, el("a", { href: `#/sessions/${encodeURIComponent(r.session_id)}` }, r.session_id)),
    el("td", {}, `r${r.revision}`), el("td", { class: "phase" }, r.phase),
    el("td", { class: "rotation" }, r.in_rotation ? "yes" : "no"), el("td", {}, r.reason || ""));
}

function tokenRow(t) {
  const { el } = page.ctx;
  const revoke = t.revoked ? null : el("button",
    { type: "button", class: "revoke", "data-revoke": t.token_id, onclick: () => revokeToken(t.token_id) },
    "revoke");
  return el("tr", { "data-token": t.token_id },
    el("td", { class: "id" }, t.token_id), el("td", {}, time(t.expires_at)),
    el("td", { class: "state" }, t.revoked ? "revoked" : "valid"), el("td", {}, revoke));
}

// ---- writing: each the user's own serve request; the serving actor's answer shown ------

function here() {
  return `/ui/endpoints/${encodeURIComponent(page.name)}`;
}

// `applied()`, if given, runs once the request is applied, before the page is read again.
async function ask(path, body, result, applied = null) {
  const out = $(result);
  out.className = "muted";
  out.textContent = "asking…";
  try {
    const answer = await page.ctx.call("POST", path, body);
    if (!answer.decided) {
      out.textContent = `asked (request ${answer.request_id}); no answer yet`;
    } else if (answer.applied) {
      out.className = "ok";
      out.textContent = "done";
      if (applied) applied();
    } else {
      out.className = "error";
      out.textContent = `refused (${answer.code}): ${answer.refused}`;
    }
    out.dataset.applied = String(answer.applied);
    refresh();
    return answer;
  } catch (e) {
    if (e instanceof page.ctx.Unauthorized) page.ctx.signedOut(e.message);
    out.className = "error";
    out.textContent = e.message;
    out.dataset.applied = "false";
    return null;
  }
}

async function scale(event) {
  event.preventDefault();
  const replicas = Number($("#endpoint-scale-replicas").value);
  await ask(`${here()}/scale`, { replicas }, "#endpoint-scale-result");
}

async function makeToken(event) {
  event.preventDefault();
  $("#token-new").hidden = true;
  $("#token-value").textContent = "";
  const answer = await ask(`${here()}/tokens`, { days: Number($("#token-days").value) }, "#token-result");
  if (answer && answer.token) {
    $("#token-value").textContent = answer.token;
    $("#token-new").hidden = false;
  }
}

async function point(revision) {
  const atOnce = $("#endpoint-point-at-once").checked;
  await ask(`${here()}/point`, { revision, at_once: atOnce }, "#endpoint-point-result");
}

async function split() {
  const shares = [...document.querySelectorAll("#endpoint-revisions input.share")]
    .map((box) => ({ revision: Number(box.dataset.share), traffic: Number(box.value) }))
    .filter((share) => share.traffic > 0); // a revision not named runs no replica
  // Once applied, the rows show the shares as the endpoint has them, not as typed.
  await ask(`${here()}/traffic`, { shares }, "#endpoint-traffic-result", () => page.typed.clear());
}

async function setAutoscale(event) {
  event.preventDefault();
  const n = (id) => Number($(id).value);
  const rule = {
    metric: $("#autoscale-metric").value, up: n("#autoscale-up"), down: n("#autoscale-down"),
    min_replicas: n("#autoscale-min"), max_replicas: n("#autoscale-max"), step: n("#autoscale-step"),
    cooldown_s: n("#autoscale-cooldown"),
  };
  await ask(`${here()}/autoscale`, rule, "#autoscale-result");
}

async function autoscaleOff() {
  await ask(`${here()}/autoscale`, { off: true }, "#autoscale-result");
}

async function revokeToken(tokenId) {
  await ask(`${here()}/tokens/${encodeURIComponent(tokenId)}/revoke`, undefined, "#token-result");
}

$("#endpoint-scale-form").addEventListener("submit", scale);
$("#token-form").addEventListener("submit", makeToken);
$("#endpoint-autoscale-form").addEventListener("submit", setAutoscale);
$("#autoscale-off").addEventListener("click", autoscaleOff);
$("#endpoint-traffic-set").addEventListener("click", split);

async function loadOne() {
  const ep = await page.ctx.call("GET", `/v1/endpoints/${encodeURIComponent(page.name)}`);
  $("#endpoint-title-name").textContent = `${ep.name} (${ep.endpoint_id})`;
  $("#endpoint-summary").textContent =
    `${ep.path} through the proxy, ${ep.public ? "public" : "with a token"}; ` +
    `project ${ep.project}, group ${ep.group}, owner ${ep.owner}; ${replicaCount(ep)}`;
  const ro = ep.rollout;
  $("#endpoint-rollout").textContent = ro
    ? `rolling update to r${ro.revision}: ${ro.healthy} of ${ro.replicas} healthy ` +
      `(max surge ${ro.max_surge}, max unavailable ${ro.max_unavailable}, since ${time(ro.started_at)})`
    : "no rolling update under way";
  $("#endpoint-autoscale").textContent = `autoscaling: ${autoscale(ep.autoscale)}`;
  const wanted = new Map(ep.targets.map((t) => [t.revision, t.replicas]));
  const top = ep.targets.reduce((a, t) => (a === null || t.traffic > a.traffic ? t : a), null);
  if ($("#endpoint-scale-replicas").value === "") $("#endpoint-scale-replicas").value = String(top ? top.replicas : 0);
  $("#endpoint-revisions tbody").replaceChildren(...ep.revisions.map((r) => revisionRow(r, wanted)));
  $("#endpoint-replicas tbody").replaceChildren(...ep.replicas.map(replicaRow));
  $("#endpoint-tokens tbody").replaceChildren(...ep.tokens.map(tokenRow));
  $("#endpoint-tokens-none").hidden = ep.tokens.length > 0;
  document.body.dataset.endpointShown = ep.name;
}

// Show the endpoints (`name` null) or endpoint `name`; `ctx` holds the page's helpers.
export async function show(name, ctx) {
  page.ctx = ctx;
  page.name = name;
  page.shown = true;
  $("#serving").hidden = false;
  $("#endpoint-list").hidden = name !== null;
  $("#endpoint").hidden = name === null;
  $("#serving-problem").textContent = "";
  if (name !== null) { // nothing of the endpoint shown before stays while this one is read
    delete document.body.dataset.endpointShown;
    for (const id of ["#endpoint-title-name", "#endpoint-summary", "#endpoint-rollout", "#endpoint-autoscale",
      "#endpoint-scale-result", "#endpoint-point-result", "#endpoint-traffic-result", "#autoscale-result",
      "#token-result", "#token-value"]) {
      $(id).textContent = "";
    }
    $("#token-new").hidden = true;
    $("#endpoint-scale-replicas").value = "";
    page.typed.clear();
    for (const t of ["revisions", "replicas", "tokens"]) $(`#endpoint-${t} tbody`).replaceChildren();
  }
  await refresh();
}

export async function refresh() {
  if (!page.shown) return;
  try {
    if (page.name === null) await loadList();
    else await loadOne();
  } catch (e) { problem(e); }
}

export function hide() {
  $("#serving").hidden = true;
  page.shown = false;
  page.name = null;
}
