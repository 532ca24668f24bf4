// The audit console: the read API, shown. No framework, nothing fetched from elsewhere.
// Deep links: /console?seq=N or ?at=ISO-TIME (the cluster then), &session=ID (its story).
"use strict";

const $ = (selector) => document.querySelector(selector);
const STATUSES = ["REQUESTED", "PENDING", "SCHEDULED", "PREPARING", "PULLING", "RUNNING",
  "TERMINATING", "TERMINATED", "CANCELLED", "ERROR", "REJECTED"];
const ENDED = new Set(["TERMINATED", "CANCELLED", "ERROR", "REJECTED"]);
const PAGE = 200;
const ENVELOPE = new Set(["type", "id", "at", "actor", "causation_id", "correlation_id"]);

let lastSeq = 0; // the newest record the projections hold
let shownSeq = 0; // the record the cluster view is at
let timelineAfter = 0;
let filter = {};
let refreshTimer = null;
const seenTypes = new Set();
// The API's bearer token, for this tab only (sessionStorage); none on a cluster with no
// tenancy, which needs none.
const TOKEN = "fgpu-token";

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "style") node.style.cssText = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k.startsWith("data-")) node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

async function api(path, params = {}) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params)) {
    for (const one of Array.isArray(v) ? v : [v]) {
      if (one !== "" && one !== null && one !== undefined) url.searchParams.append(k, one);
    }
  }
  const token = sessionStorage.getItem(TOKEN);
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const response = await fetch(url, { headers });
  const body = await response.json();
  if (response.status === 401) {
    sessionStorage.removeItem(TOKEN);
    signIn(body.detail);
  }
  if (!response.ok) throw new Error(body.detail || response.statusText);
  return body;
}

// ---- signing in -------------------------------------------------------------------------

let signedIn = null; // resolves once a token is held

function signIn(why) {
  const dialog = $("#sign-in");
  if (!dialog.open) dialog.showModal();
  $("#sign-in-error").textContent = why && sessionStorage.getItem(TOKEN) ? why : "";
  if (!signedIn) {
    signedIn = new Promise((resolve) => {
      $("#sign-in-form").addEventListener("submit", async function submit(ev) {
        ev.preventDefault();
        const response = await fetch("/v1/auth/token", {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({
            access_key: $("#sign-in-key").value.trim(),
            secret_key: $("#sign-in-secret").value,
          }),
        });
        const body = await response.json();
        if (!response.ok) {
          $("#sign-in-error").textContent = body.detail || response.statusText;
          return;
        }
        sessionStorage.setItem(TOKEN, body.token);
        $("#sign-in-secret").value = "";
        $("#sign-in-form").removeEventListener("submit", submit);
        dialog.close();
        signedIn = null;
        resolve();
      });
    });
  }
  return signedIn;
}

async function whoami() {
  // Until the API knows who asks: a cluster with tenancy answers 401 without a token.
  for (;;) {
    const token = sessionStorage.getItem(TOKEN);
    const response = await fetch("/v1/auth/whoami", {
      headers: token ? { Authorization: `Bearer ${token}` } : {},
    });
    if (response.ok) return response.json();
    sessionStorage.removeItem(TOKEN);
    await signIn();
  }
}

function showIdentity(me) {
  if (!me.user) {
    $("#who").textContent = "open cluster (no tenancy)";
    return;
  }
  $("#who").textContent = `${me.user} (${me.role}${me.domain ? `, ${me.domain}` : ""}): sees ${me.sees}`;
  $("#sign-out").hidden = false;
}

function fail(error) {
  $("#error").textContent = String(error.message || error);
}

function color(id) {
  let h = 7;
  for (const c of id) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return `hsl(${h % 360} 55% 40%)`;
}

function time(iso) {
  return iso ? iso.replace("T", " ").replace(/(\.\d{3})\d*/, "$1").replace(/(Z|\+00:00)$/, "") : "";
}

function utcInput(value) {
  // datetime-local inputs hold a wall-clock time; the console speaks UTC.
  return value ? `${value}Z` : "";
}

function fgpu(quanta) {
  return String(quanta / 100);
}

function link(text, onclick, cls = "") {
  return el("a", { class: cls, onclick: (ev) => { ev.preventDefault(); onclick(); } }, text);
}

// ---- the cluster at an instant ----------------------------------------------------------

async function showState(params) {
  try {
    const state = await api("/v1/state", params);
    renderState(state);
    $("#error").textContent = "";
  } catch (error) {
    fail(error);
  }
}

function renderState(s) {
  shownSeq = s.seq;
  lastSeq = Math.max(lastSeq, s.last_seq);
  const slider = $("#seq-slider");
  slider.max = lastSeq;
  slider.value = s.seq;
  $("#seq-input").value = s.seq;
  $("#seq-input").max = lastSeq;
  const counts = STATUSES.filter((st) => s.counts[st]).map((st) => `${s.counts[st]} ${st}`);
  $("#state-summary").textContent =
    `after event #${s.seq}${s.at ? ` (${time(s.at)} UTC)` : ""} of ${lastSeq}: ` +
    (counts.length ? counts.join(", ") : "no sessions");
  $("#state-summary").dataset.seq = s.seq;

  const bySession = new Map(s.sessions.map((v) => [v.id, v]));
  const groups = $("#sessions-by-status");
  groups.replaceChildren();
  for (const status of STATUSES) {
    const n = s.counts[status] || 0;
    if (!n) continue;
    const chips = s.sessions.filter((v) => v.status === status).map((v) =>
      el("span", {
        class: "session-chip", "data-session": v.id, style: `background:${color(v.id)}`,
        title: `${v.owner}: ${v.requested.fgpu} fGPU${v.waiting ? ` (waiting: ${v.waiting})` : ""}`,
        onclick: () => tell(v.id),
      }, v.id));
    groups.append(el("div", { class: "status-group", "data-status": status },
      el("h4", {}, status, " ", el("span", { class: "count" }, `(${n})`)),
      ...(ENDED.has(status) ? [el("span", { class: "muted" }, "ended")] : chips)));
  }

  const agents = $("#agents");
  agents.replaceChildren();
  for (const a of s.agents) {
    const box = el("div", { class: `agent${a.lost ? " lost" : ""}`, "data-agent": a.id },
      el("div", {}, el("span", { class: "name" }, a.id),
        el("span", { class: "muted" },
          `  ${a.allocated.fgpu}/${a.capacity.fgpu} fGPU, 1 GPU = ${a.fgpu_per_gpu} fGPU`)));
    for (const g of a.gpus) {
      const bar = el("div", { class: "gpu-bar", "data-agent": a.id, "data-gpu": g.index });
      const capacity = parseFloat(g.capacity) || 1;
      for (const share of g.shares) {
        const v = bySession.get(share.session);
        bar.append(el("span", {
          class: "share", "data-session": share.session, "data-fgpu": share.fgpu,
          style: `width:${(100 * parseFloat(share.fgpu)) / capacity}%;background:${color(share.session)}`,
          title: `${share.session} (${share.owner || "?"}): ${share.fgpu} fGPU${v ? `, ${v.status}` : ""}`,
          onclick: () => tell(share.session),
        }, `${share.session} ${share.fgpu}`));
      }
      bar.append(el("span", { class: "free", title: `${g.free} fGPU free` }));
      box.append(el("div", { class: "gpu" },
        el("span", {}, `gpu${g.index}`), bar,
        el("span", { class: "muted" }, `${g.allocated}/${g.capacity}`)));
    }
    agents.append(box);
  }
}

function following() {
  return $("#live").checked;
}

function scheduleRefresh() {
  if (refreshTimer !== null) return;
  refreshTimer = setTimeout(() => {
    refreshTimer = null;
    if (following()) showState({});
  }, 250);
}

// ---- a session's story ------------------------------------------------------------------

async function tell(id) {
  $("#story-id").value = id;
  const box = $("#story");
  try {
    const h = await api(`/v1/sessions/${encodeURIComponent(id)}/history`);
    const s = h.session;
    const placement = s.devices.map((d) => `gpu${d.gpu}: ${d.fgpu}`).join(", ");
    box.replaceChildren(
      el("p", { class: "summary", "data-session": s.id }, `${s.id}: ${s.status}. ${h.summary}`),
      el("p", { class: "muted" },
        `${s.owner} asked for ${s.requested.fgpu} fGPU of ${s.image}` +
        (s.agent ? `; placed on ${s.agent} (${placement})` : "") +
        (s.exit_code !== null ? `; exit code ${s.exit_code}` : "")),
      el("ol", {}, ...h.story.map((line) =>
        el("li", { class: line.effect ? "" : "no-effect", "data-seq": line.seq },
          el("span", { class: "when" }, `${time(line.at)} `),
          link(`#${line.seq}`, () => { $("#live").checked = false; showState({ seq: line.seq }); }),
          ` ${line.actor}: ${line.text}`))));
    $("#error").textContent = "";
  } catch (error) {
    box.replaceChildren(el("p", { class: "muted" }, String(error.message || error)));
  }
}

// ---- the timeline -----------------------------------------------------------------------

function what(e) {
  const d = e.data || {};
  switch (e.type) {
    case "session.requested.v1":
      return `${d.owner} asks ${fgpu(d.slots.fgpu)} fGPU for ${d.image}`;
    case "session.admitted.v1": return "admitted";
    case "session.queued.v1": return `waits: ${d.reason}`;
    case "session.scheduled.v1":
      return `on ${d.agent_id} ` + d.devices.map((x) => `gpu${x.gpu_index}:${fgpu(x.fgpu)}`).join(" ");
    case "session.running.v1": return `container ${d.container_id.slice(0, 12)}`;
    case "session.terminated.v1": return `exit ${d.exit_code === null ? "?" : d.exit_code}: ${d.reason}`;
    case "agent.registered.v1":
      return `${d.gpus.length} GPU(s), ${fgpu(d.capacity.fgpu)} fGPU, runtime ${d.runtime}`;
    default: {
      if (e.error) return e.error;
      if (e.raw !== null && e.raw !== undefined) return e.raw.slice(0, 120);
      for (const key of ["reason", "error"]) if (d[key]) return d[key];
      const rest = Object.entries(d).filter(([k]) => !ENVELOPE.has(k) && !k.endsWith("_id"));
      return rest.map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`).join(" ");
    }
  }
}

function row(e) {
  if (!seenTypes.has(e.type)) {
    seenTypes.add(e.type);
    $("#f-type").append(el("option", { value: e.type }, e.type));
  }
  return el("tr", { class: e.type === "malformed" ? "malformed" : "", "data-seq": e.seq, "data-type": e.type },
    el("td", { class: "seq" }, link(String(e.seq), () => {
      $("#live").checked = false;
      showState({ seq: e.seq });
    })),
    el("td", {}, time(e.at)),
    el("td", {}, e.type),
    el("td", {}, e.actor || ""),
    el("td", { class: "sid" }, e.session_id ? link(e.session_id, () => tell(e.session_id)) : ""),
    el("td", {}, e.agent_id || ""),
    el("td", {}, what(e)));
}

async function loadTimeline(reset) {
  try {
    const page = await api("/v1/events", { ...filter, after: reset ? 0 : timelineAfter, limit: PAGE });
    const body = $("#timeline tbody");
    if (reset) body.replaceChildren();
    body.append(...page.events.map(row));
    timelineAfter = page.next_after;
    $("#more").disabled = page.events.length < PAGE;
    $("#error").textContent = "";
  } catch (error) {
    fail(error);
  }
}

function readFilters() {
  filter = {
    session: $("#f-session").value.trim(),
    owner: $("#f-owner").value.trim(),
    agent: $("#f-agent").value.trim(),
    type: $("#f-type").value,
    since: utcInput($("#f-since").value),
    until: utcInput($("#f-until").value),
  };
}

function unfiltered() {
  return Object.values(filter).every((v) => !v);
}

// ---- live -------------------------------------------------------------------------------

function listen() {
  const token = sessionStorage.getItem(TOKEN);
  const auth = token ? `&access_token=${encodeURIComponent(token)}` : "";
  const stream = new EventSource(`/v1/events/stream?after=${lastSeq}${auth}`);
  stream.onopen = () => { $("#log-status").textContent = `live, at event #${lastSeq}`; };
  stream.onerror = () => { $("#log-status").textContent = "reconnecting…"; };
  stream.onmessage = () => {};
  const onEvent = (message) => {
    const seq = Number(message.lastEventId);
    const wasAtEnd = shownSeq >= lastSeq;
    lastSeq = Math.max(lastSeq, seq);
    $("#seq-slider").max = lastSeq;
    $("#log-status").textContent = `live, at event #${lastSeq}`;
    if (unfiltered() && seq > timelineAfter && $("#more").disabled) {
      $("#timeline tbody").append(row(JSON.parse(message.data)));
      timelineAfter = seq;
    }
    if (following() && wasAtEnd) scheduleRefresh();
  };
  // Every event type arrives as its own SSE event name: listen to the ones seen, and to
  // any other through the catalogue of names the stream may send.
  for (const name of CATALOGUE) stream.addEventListener(name, onEvent);
}

const CATALOGUE = [
  "session.requested.v1", "session.destroy-requested.v1", "session.admitted.v1",
  "session.rejected.v1", "session.scheduled.v1", "session.queued.v1", "session.cancelled.v1",
  "session.terminating.v1", "session.preparing.v1", "session.running.v1",
  "session.terminated.v1", "session.errored.v1", "session.destroy-rejected.v1",
  "policy.set.v1", "payload.rejected.v1", "agent.registered.v1", "agent.lost.v1",
  "gpu.usage-sampled.v1", "gpu.oom-refused.v1", "admin.requested.v1", "admin.applied.v1",
  "admin.refused.v1", "access.granted.v1", "access.refused.v1", "access.suppressed.v1",
  "session.unplaced.v1", "session.lost.v1", "agent.fenced.v1", "agent.heard.v1",
  "log.archived.v1", "session.exec-started.v1", "session.exec-finished.v1",
  "session.cpu-sampled.v1", "session.channel-opened.v1", "session.channel-closed.v1",
  "session.pulling.v1", "agent.images-reported.v1", "vfolder.scanned.v1",
  "access.requests-dropped.v1", "gpu.over-slice.v1", "gpu.share-exceeded.v1", "log.health.v1",
  "serve.requested.v1", "serve.refused.v1", "endpoint.created.v1", "endpoint.revision-added.v1",
  "endpoint.replicas-set.v1", "endpoint.removed.v1", "endpoint.token-created.v1",
  "endpoint.token-revoked.v1", "replica.changed.v1", "replica.rotation.v1",
  "replica.health-reported.v1", "endpoint.rollout-started.v1", "endpoint.rollout-ended.v1",
  "serving.ticked.v1", "endpoint.autoscale-set.v1", "route.stats-reported.v1",
  "secret.set.v1", "secret.removed.v1", "secret.key-set.v1",
  "pipeline.run-requested.v1", "pipeline.cancel-requested.v1",
  "pipeline.rerun-requested.v1", "pipeline.request-refused.v1", "pipeline.task-requested.v1",
  "pipeline.task-ended.v1", "pipeline.tasks-requested.v1",
  "pipeline.tasks-ended.v1", "pipeline.retry-scheduled.v1", "pipeline.run-cancelled.v1",
  "pipeline.rerun-started.v1", "pipeline.run-ended.v1", "pipeline.schedule-set.v1",
  "pipeline.schedule-removed.v1", "pipeline.schedule-fired.v1", "pipeline.schedule-refused.v1",
  "malformed",
];

// ---- wiring -----------------------------------------------------------------------------

function wire() {
  const slider = $("#seq-slider");
  slider.addEventListener("input", () => { $("#seq-input").value = slider.value; });
  slider.addEventListener("change", () => {
    $("#live").checked = Number(slider.value) >= lastSeq;
    showState({ seq: slider.value });
  });
  $("#when").addEventListener("submit", (ev) => {
    ev.preventDefault();
    $("#live").checked = false;
    const at = utcInput($("#at-input").value);
    showState(at ? { at } : { seq: $("#seq-input").value });
    $("#at-input").value = "";
  });
  $("#now").addEventListener("click", () => { $("#live").checked = true; showState({}); });
  $("#live").addEventListener("change", () => { if (following()) showState({}); });
  $("#story-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const id = $("#story-id").value.trim();
    if (id) tell(id);
  });
  $("#filters").addEventListener("submit", (ev) => {
    ev.preventDefault();
    readFilters();
    loadTimeline(true);
  });
  $("#f-clear").addEventListener("click", () => {
    for (const id of ["#f-session", "#f-owner", "#f-agent", "#f-type", "#f-since", "#f-until"]) $(id).value = "";
    readFilters();
    loadTimeline(true);
  });
  $("#more").addEventListener("click", () => loadTimeline(false));
  $("#sign-out").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN);
    location.reload();
  });
}

async function start() {
  wire();
  showIdentity(await whoami());
  const params = new URLSearchParams(location.search);
  const at = params.get("at");
  const seq = params.get("seq");
  if (at || seq) $("#live").checked = false;
  await showState(at ? { at } : seq ? { seq } : {});
  readFilters();
  await loadTimeline(true);
  if (params.get("session")) await tell(params.get("session"));
  listen();
  document.body.dataset.ready = "true";
}

start();
