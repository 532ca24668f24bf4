// The administrators' page's resource groups (admin.js draws the rest): the table as
// GET /v1/groups shows this administrator, and the changes `fgpu admin group create|update|rm`
// make, each its own request (POST, PATCH, DELETE /ui/admin/groups..., ui_admin_groups.py).
// A change gives only what the administrator typed: the server lays it over the settings
// as they hold and names those, so nothing someone else changed meanwhile is undone. The
// registrar lets superadmins alone change a group; a domain admin is told its reason.

const $ = (selector) => document.querySelector(selector);
let act = null; // admin.js's write, given by wire()

// The form's inputs for the settings that take a number of seconds, or none.
const TIMES = [
  ["#admin-group-pending", "pending_timeout_s", "pending timeout"],
  ["#admin-group-default-lifetime", "default_lifetime_s", "default lifetime"],
  ["#admin-group-max-lifetime", "max_lifetime_s", "max lifetime"],
  ["#admin-group-idle", "idle_timeout_s", "idle timeout"],
];

function times(g) {
  const parts = [["pending", g.pending_timeout_s], ["default lifetime", g.default_lifetime_s],
    ["max lifetime", g.max_lifetime_s], ["idle", g.idle_timeout_s]]
    .filter(([, v]) => v !== null && v !== undefined).map(([k, v]) => `${k} ${v}`);
  return parts.join(", ");
}

// The groups' table; `agentList` names each group's agents.
export function groupsTable(el, groups, agentList) {
  $("#admin-groups tbody").replaceChildren(...groups.map((g) => el("tr", {
    "data-group": g.group },
  ...[g.group, g.queue, g.configured ? g.policy : "the scheduler's", g.fgpu_quantum || "0.01",
    g.projects === null ? "every project" : g.projects.join(", "), times(g),
    agentList.filter((a) => a.group === g.group).map((a) => a.id).join(", ")]
    .map((v) => el("td", {}, String(v ?? ""))),
  el("td", {},
    el("button", { type: "button", class: "edit-group", onclick: () => edit(g) }, "edit"),
    g.group === "default" ? null : el("button", { type: "button", class: "remove-group",
      onclick: () => remove(g.group) }, "remove")))));
}

// The form made ready to change `g`: each field empty (kept) and showing what holds now.
function edit(g) {
  $("#admin-group-name").value = g.group;
  $("#admin-group-queue").value = "";
  $("#admin-group-policy").value = "";
  const shown = (v) => (v === null || v === undefined ? "none" : String(v));
  $("#admin-group-quantum").placeholder = g.fgpu_quantum || "none (0.01)";
  $("#admin-group-projects").placeholder = g.projects === null ? "none (every project)"
    : g.projects.join(", ");
  for (const [id, key] of TIMES) $(id).placeholder = shown(g[key]);
  for (const id of ["#admin-group-quantum", "#admin-group-projects", ...TIMES.map(([i]) => i)]) {
    $(id).value = "";
  }
  $("#admin-group-result").textContent = `changing ${g.group}: what is left empty is kept`;
  $("#admin-group-quantum").focus();
}

// What the form gives: {body, clear}; throws an Error naming a field that is not right.
function given(creating) {
  const body = {};
  const clear = [];
  const text = (id) => $(id).value.trim();
  for (const [id, key, name] of TIMES) {
    const v = text(id);
    if (v === "") continue;
    if (v === "none") clear.push(key);
    else if (/^\d+$/.test(v)) body[key] = Number(v);
    else throw new Error(`${name}: a whole number of seconds, or none`);
  }
  const quantum = text("#admin-group-quantum");
  if (quantum === "none") clear.push("fgpu_quantum");
  else if (quantum) body.fgpu_quantum = quantum;
  const projects = text("#admin-group-projects");
  if (projects === "none") clear.push("projects");
  else if (projects) body.projects = projects.split(/[\s,]+/).filter(Boolean);
  if ($("#admin-group-queue").value) body.queue = $("#admin-group-queue").value;
  if ($("#admin-group-policy").value) body.policy = $("#admin-group-policy").value;
  if (!creating) body.clear = clear; // on creation "none" is what is not given
  return body;
}

async function save(ev) {
  ev.preventDefault();
  const creating = ev.submitter?.id === "admin-group-create";
  const group = $("#admin-group-name").value.trim();
  let body;
  try {
    body = given(creating);
  } catch (e) {
    $("#admin-group-result").className = "error";
    $("#admin-group-result").textContent = e.message;
    return;
  }
  if (creating) await act("POST", "/ui/admin/groups", { group, ...body }, "#admin-group-result");
  else {
    await act("PATCH", `/ui/admin/groups/${encodeURIComponent(group)}`, body,
      "#admin-group-result");
  }
}

async function remove(group) {
  if (!confirm(`Remove resource group ${group}? No new session may ask for it.`)) return;
  await act("DELETE", `/ui/admin/groups/${encodeURIComponent(group)}`, undefined,
    "#admin-group-result");
}

// Wire the forms: `write(method, path, body, result)` is admin.js's (the answer shown in
// `result`, the tables read again).
export function wire(write) {
  act = write;
  $("#admin-group-form").addEventListener("submit", save);
}
