// The administrators' pages (#/admin, or #/admin/SECTION to scroll to one): what the read
// API shows this administrator (its domain's; a superadmin's: every domain's) and its
// writes (resource groups: admin_groups.js; image allow-lists and aliases:
// admin_images.js), each its own admin request (POST /ui/admin/..., ui_admin*.py) that
// the registrar judges as it judges the CLI's; a refusal shows inline with the
// registrar's reason. Every name from the log is set as text, never parsed as HTML. A
// new keypair's secret is shown once and wiped from the page when dismissed or left.
import { groupsTable, wire as wireGroups } from "./admin_groups.js";
import { imagesTable, wire as wireImages } from "./admin_images.js";

const $ = (selector) => document.querySelector(selector);
const page = { ctx: null, who: null, loading: null };
const POLICY_LIMITS = [
  ["max_sessions", "sessions"], ["max_pending_sessions", "pending sessions"],
  ["max_pending", "pending"], ["total", "total"], ["max_priority", "priority"],
];

export function isAdministrator(who) {
  return who.role === "domain-admin" || who.role === "superadmin";
}

const UNLIMITED = 2 ** 62; // the log's largest amount: a policy's "no limit"

// Amounts as text, leaving out those a policy leaves unlimited.
function amounts(a) {
  if (!a) return "";
  const parts = [[a.fgpu, "fGPU"], [a.cpu, "CPU"]].filter(([v]) => v !== "unlimited")
    .map(([v, unit]) => `${v} ${unit}`);
  if (Number(a.mem) < UNLIMITED) parts.push(`${gib(a.mem)} memory`);
  return parts.join(", ");
}

function gib(bytes) {
  const n = Number(bytes);
  return Number.isFinite(n) ? `${+(n / 1024 ** 3).toFixed(2)} GiB` : String(bytes);
}

function cells(el, values) {
  return values.map((v) => el("td", {}, v === null || v === undefined ? "" : String(v)));
}

// ---- the agents: each GPU a bar split into the sessions' shares and the free part -----

function gpuBar(el, g, users) {
  const bar = el("div", { class: "bar", role: "img" });
  let named = 0;
  const parts = g.shares.map((s) => {
    named += Number(s.fgpu);
    const who = users.get(s.owner) || s.owner || "?";
    const part = el("span", { class: "share", "data-session": s.session, "data-fgpu": s.fgpu,
      title: `${s.session} (${who}): ${s.fgpu} fGPU` }, `${who} ${s.fgpu}`);
    part.style.flexGrow = s.fgpu; // CSSOM, not a style attribute: the CSP allows it
    return part;
  });
  // Shares of sessions out of this viewer's scope count, unnamed (as /v1/agents says).
  const others = Number(g.allocated) - named;
  if (others > 1e-9) {
    const part = el("span", { class: "share others", title: `others: ${others} fGPU` }, "others");
    part.style.flexGrow = String(others);
    parts.push(part);
  }
  const free = el("span", { class: "free", "data-fgpu": g.free, title: `free: ${g.free} fGPU` },
    `free ${g.free}`);
  free.style.flexGrow = g.free;
  bar.append(...parts, free);
  bar.setAttribute("aria-label",
    `gpu${g.index}: ${g.shares.map((s) => `${users.get(s.owner) || s.owner} ${s.fgpu}`)
      .join(", ") || "no named share"}; free ${g.free} of ${g.capacity}`);
  return el("div", { class: "gpu", "data-gpu": g.index },
    el("span", { class: "muted" }, `gpu${g.index} ${g.model} (${g.capacity} fGPU)`), bar);
}

function agents(el, list, users) {
  $("#admin-agents").replaceChildren(...list.map((a) => el("div", {
    class: "agent", "data-agent": a.id },
  el("h4", {}, `${a.id}${a.lost ? " (lost)" : ""}`, el("span", { class: "muted" },
    ` group ${a.group}; ${a.sessions} sessions; free ${amounts(a.free)} of ${amounts(a.capacity)}`)),
  ...a.gpus.map((g) => gpuBar(el, g, users)))));
  if (!list.length) $("#admin-agents").replaceChildren(el("p", { class: "muted" }, "No agent."));
}

function pending(el, sessions, users) {
  $("#admin-pending tbody").replaceChildren(...sessions.map((s) => el("tr", {
    "data-session": s.id },
  el("td", { class: "sid" }, el("a", { href: `#/sessions/${encodeURIComponent(s.id)}` }, s.id)),
  ...cells(el, [s.user || users.get(s.owner) || s.owner, s.name, s.status, s.group,
    amounts(s.requested)]),
  el("td", { class: "why" }, s.waiting || "not judged yet"))));
  $("#admin-pending-empty").hidden = sessions.length > 0;
}

// ---- users, keypairs, policies, presets --------------------------------------------

function usersTable(el, users, keypairs) {
  $("#admin-users tbody").replaceChildren(...users.map((u) => {
    const keys = keypairs.filter((k) => k.user === u.user).map((k) => el("li", {
      "data-key": k.access_key, "data-revoked": String(k.revoked) },
    el("code", {}, k.access_key), ` ${k.revoked ? "revoked" : "active"} `,
    k.revoked ? null : el("button", { type: "button", class: "revoke",
      onclick: () => revoke(k.access_key) }, "revoke")));
    return el("tr", { "data-user": u.user },
      ...cells(el, [u.user, u.domain, u.role, u.projects.join(", ")]),
      el("td", {}, el("ul", { class: "keys" }, ...keys)),
      el("td", {}, el("button", { type: "button", class: "new-keypair", "data-user": u.user,
        onclick: () => newKeypair(u.user) }, "new keypair")));
  }));
}

function limit(p, key) {
  const v = p[key];
  if (v === null || v === undefined) return "";
  return typeof v === "object" ? amounts(v) : String(v);
}

function policiesTable(el, policies) {
  $("#admin-policies tbody").replaceChildren(...policies.map((p) => el("tr", {
    "data-level": p.level, "data-target": p.target },
  ...cells(el, [p.level, p.target, ...POLICY_LIMITS.map(([k]) => limit(p, k))]))));
}

function presetsTable(el, presets) {
  $("#admin-presets tbody").replaceChildren(...presets.map((p) => el("tr", {
    "data-preset": p.name },
  ...cells(el, [p.name, p.domain || "every domain", p.group || "any",
    p.slots.fgpu, p.slots.cpu, gib(p.slots.mem)]),
  el("td", {}, el("button", { type: "button", class: "remove-preset",
    onclick: () => removePreset(p) }, "remove")))));
}

// ---- reading ------------------------------------------------------------------------------

async function read(path) {
  return page.ctx.call("GET", path);
}

// Everything, read again (after a write, and when the page opens).
async function load() {
  const { el } = page.ctx;
  const [users, keypairs, policies, groups, images, presets] = await Promise.all([
    read("/v1/users"), read("/v1/keypairs"), read("/v1/policies"), read("/v1/groups"),
    read("/v1/image-policies"), read("/v1/presets")]);
  page.users = new Map(keypairs.filter((k) => k.user).map((k) => [k.access_key, k.user]));
  usersTable(el, users, keypairs);
  policiesTable(el, policies);
  imagesTable(el, images);
  presetsTable(el, presets);
  page.groups = groups;
  await live();
}

// What moves with the sessions: the agents' shares and the pending queue.
async function live() {
  const { el } = page.ctx;
  const [list, waiting] = await Promise.all([read("/v1/agents"),
    read("/v1/sessions?status=REQUESTED&status=PENDING&limit=200")]);
  agents(el, list.agents, page.users || new Map());
  pending(el, waiting.sessions, page.users || new Map());
  groupsTable(el, page.groups || [], list.agents);
  document.body.dataset.adminSeq = String(list.last_seq);
}

function failed(e) {
  if (e instanceof page.ctx.Unauthorized) return page.ctx.signedOut(e.message);
  $("#admin-problem").textContent = e.message;
}

// ---- writing: each the administrator's own request; the registrar's answer shown -----

async function act(method, path, body, result) {
  const out = $(result);
  out.className = "muted";
  out.textContent = "asking…";
  try {
    const answer = await page.ctx.call(method, path, body);
    if (!answer.decided) {
      out.textContent = `asked (request ${answer.request_id}); no answer yet`;
    } else if (answer.applied) {
      out.className = "ok";
      out.textContent = "done";
    } else {
      out.className = "error";
      out.textContent = `refused (${answer.code}): ${answer.reason}`;
    }
    out.dataset.applied = String(answer.applied);
    load().catch(failed);
    return answer;
  } catch (e) {
    if (e instanceof page.ctx.Unauthorized) return page.ctx.signedOut(e.message);
    out.className = "error";
    out.textContent = e.message;
    out.dataset.applied = "false";
    return null;
  }
}

function words(text) {
  return text.split(/[\s,]+/).filter(Boolean);
}

function value(id) {
  const v = $(id).value.trim();
  return v === "" ? null : v;
}

async function createUser(ev) {
  ev.preventDefault();
  const projects = words($("#admin-user-projects").value);
  await act("POST", "/ui/admin/users", {
    user: $("#admin-user-name").value.trim(), domain: $("#admin-user-domain").value.trim(),
    role: $("#admin-user-role").value, projects, default_project: projects[0] || null,
  }, "#admin-user-result");
}

async function newKeypair(user) {
  forgetSecret();
  const answer = await act("POST", "/ui/admin/keypairs", { user }, "#admin-user-result");
  if (!answer || !answer.secret_key) return;
  // Shown this once: the page keeps it nowhere but in these two nodes, until dismissed.
  $("#admin-secret-user").textContent = user;
  $("#admin-secret-key").textContent = answer.access_key;
  $("#admin-secret-value").textContent = answer.secret_key;
  $("#admin-secret").hidden = false;
  $("#admin-secret-copied").textContent = "";
}

function forgetSecret() {
  for (const id of ["#admin-secret-user", "#admin-secret-key", "#admin-secret-value",
    "#admin-secret-copied"]) $(id).textContent = "";
  $("#admin-secret").hidden = true;
}

async function copySecret() {
  const text = $("#admin-secret-value").textContent;
  try {
    await navigator.clipboard.writeText(text);
    $("#admin-secret-copied").textContent = "copied";
  } catch {
    // No clipboard (a page not served over TLS): selected, for the keyboard's copy.
    getSelection().selectAllChildren($("#admin-secret-value"));
    $("#admin-secret-copied").textContent = "selected: copy it with the keyboard";
  }
}

async function revoke(key) {
  if (!confirm(`Revoke keypair ${key}? It connects no more.`)) return;
  await act("POST", `/ui/admin/keypairs/${encodeURIComponent(key)}/revoke`, undefined,
    "#admin-user-result");
}

async function setPolicy(ev) {
  ev.preventDefault();
  const int = (id) => (value(id) === null ? null : Number(value(id)));
  await act("POST", "/ui/admin/policies", {
    level: $("#admin-policy-level").value, target: $("#admin-policy-target").value.trim(),
    max_sessions: int("#admin-policy-sessions"), max_fgpu: value("#admin-policy-fgpu"),
    max_cpu: value("#admin-policy-cpu"), max_mem: value("#admin-policy-mem"),
  }, "#admin-policy-result");
}

async function createPreset(ev) {
  ev.preventDefault();
  await act("POST", "/ui/admin/presets", {
    name: $("#admin-preset-name").value.trim(), fgpu: value("#admin-preset-fgpu") || "0",
    cpu: $("#admin-preset-cpu").value.trim(), mem: $("#admin-preset-mem").value.trim(),
    group: value("#admin-preset-group"), domain: value("#admin-preset-domain"),
  }, "#admin-preset-result");
}

async function removePreset(p) {
  const query = p.domain ? `?domain=${encodeURIComponent(p.domain)}` : "";
  await act("DELETE", `/ui/admin/presets/${encodeURIComponent(p.name)}${query}`, undefined,
    "#admin-preset-result");
}

// ---- showing ------------------------------------------------------------------------------

// Show the administrators' page to `who` (its identity); `section` scrolled to. A user
// is told it is not theirs, and nothing is read.
export function show(ctx, who, section) {
  page.ctx = ctx;
  page.who = who;
  $("#admin").hidden = false;
  document.body.dataset.page = "admin";
  const allowed = isAdministrator(who);
  $("#admin-refused").hidden = allowed;
  $("#admin-body").hidden = !allowed;
  $("#admin-problem").textContent = "";
  if (!allowed) {
    $("#admin-refused").textContent =
      `Administrators only: ${who.user} is a ${who.role}, and administers nothing.`;
    return;
  }
  $("#admin-scope").textContent = who.role === "superadmin" ? "(every domain)"
    : `(domain ${who.domain})`;
  if (!$("#admin-user-domain").value) $("#admin-user-domain").value = who.domain || "";
  for (const id of ["#admin-preset-domain", "#admin-images-domain", "#admin-alias-domain"]) {
    if (!$(id).value) $(id).value = who.domain || "";
  }
  page.loading = load().then(() => {
    document.body.dataset.adminReady = "1";
    if (section) $(`#admin-${section}-title`)?.scrollIntoView();
  }, failed);
}

export function hide() {
  forgetSecret();
  page.who = null;
  $("#admin").hidden = true;
  if (document.body.dataset.page === "admin") document.body.dataset.page = "";
  document.body.dataset.adminReady = "";
}

// A session changed: the shares and the queue read again (the page follows the log).
export function refresh() {
  if (page.who && isAdministrator(page.who)) live().catch(failed);
}

$("#admin-user-form").addEventListener("submit", createUser);
$("#admin-policy-form").addEventListener("submit", setPolicy);
$("#admin-preset-form").addEventListener("submit", createPreset);
$("#admin-secret-copy").addEventListener("click", copySecret);
$("#admin-secret-done").addEventListener("click", forgetSecret);
wireGroups(act);
wireImages(act);
