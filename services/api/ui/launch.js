// The launch form: what /v1/launch-options says the user may launch, and POST /ui/sessions,
// the user's own request (as `fgpu session create`). Every text from the log or from the
// user is set as text, never as HTML. Shown while someone is signed in (ui.js marks
// document.body.dataset.signedIn); it reads its CSRF token from /ui/session itself.

const $ = (selector) => document.querySelector(selector);
const GIB = 1024 ** 3;
const MEM_STEP = 0.25; // GiB
const CPU_STEP = 0.1; // cores
const form = { options: null, csrf: null, requestId: null, busy: false };

function option(value, text) {
  const node = document.createElement("option");
  node.value = value;
  node.textContent = text;
  return node;
}

function decimals(step) {
  const text = String(step);
  return text.includes(".") ? text.split(".")[1].length : 0;
}

// One slot: a slider and a number input, kept equal, moving by `step`.
function slot(name, { max, step }) {
  const range = $(`#launch-${name}-range`);
  const number = $(`#launch-${name}`);
  for (const input of [range, number]) {
    input.min = "0";
    input.max = String(max);
    input.step = String(step);
  }
  range.oninput = () => { number.value = Number(range.value).toFixed(decimals(step)); };
  number.oninput = () => { range.value = number.value; };
}

function setSlot(name, value, step) {
  const text = Number(value).toFixed(decimals(step));
  $(`#launch-${name}`).value = text;
  $(`#launch-${name}-range`).value = text;
}

function group() {
  return form.options.groups.find((g) => g.group === $("#launch-group").value);
}

function fill() {
  const o = form.options;
  $("#launch-image").replaceChildren(...o.images.map((i) =>
    option(i.ref, i.ref === i.runs ? i.ref : `${i.ref} (${i.runs})`)));
  $("#launch-project").replaceChildren(...o.projects.map((p) => option(p, p)));
  if (o.default_project) $("#launch-project").value = o.default_project;
  fillGroups();
}

function fillGroups() {
  const project = $("#launch-project").value;
  const open = form.options.groups.filter((g) => g.projects.includes(project));
  const chosen = $("#launch-group").value;
  $("#launch-group").replaceChildren(...open.map((g) => option(g.group, g.group)));
  if (open.some((g) => g.group === chosen)) $("#launch-group").value = chosen;
  groupChosen();
}

function groupChosen() {
  const g = group();
  if (!g) return;
  const quantum = Number(g.fgpu_quantum);
  const perGpu = Math.max(Number(g.fgpu_per_gpu), quantum);
  slot("fgpu", { max: perGpu * 4, step: quantum });
  slot("cpu", { max: Math.max(Number(g.largest_cpu), 1), step: CPU_STEP });
  slot("mem", { max: Math.max(g.largest_mem / GIB, 1), step: MEM_STEP });
  $("#launch-fgpu-step").textContent = `steps of ${g.fgpu_quantum}`;
  $("#launch-free").textContent = g.agents
    ? `free now in ${g.group}: largest share on a device ${g.largest_fgpu} fGPU `
      + `(a device is ${g.fgpu_per_gpu}), ${g.largest_cpu} CPU and `
      + `${(g.largest_mem / GIB).toFixed(1)} GiB on one agent (${g.agents} agent(s))`
    : `no agent serves ${g.group} now: a session waits`;
  const presets = form.options.presets.filter((p) => !p.group || p.group === g.group);
  $("#launch-preset").replaceChildren(option("", "(none)"),
    ...presets.map((p) => option(p.name, `${p.name}: ${p.slots.fgpu} fGPU, ${p.slots.cpu} CPU, `
      + `${(p.slots.mem / GIB).toFixed(2)} GiB`)));
  rooms();
}

function presetChosen() {
  const p = form.options.presets.find((x) => x.name === $("#launch-preset").value);
  if (!p) return;
  setSlot("fgpu", p.slots.fgpu, Number(group().fgpu_quantum));
  setSlot("cpu", p.slots.cpu, CPU_STEP);
  setSlot("mem", p.slots.mem / GIB, MEM_STEP);
}

function amounts(a) {
  if (!a) return "no limit";
  const mem = a.mem >= 2 ** 62 ? "unlimited" : `${(a.mem / GIB).toFixed(2)} GiB`;
  return `${a.fgpu} fGPU, ${a.cpu} CPU, ${mem}`;
}

// What each of the four policy levels leaves, for the chosen project.
function rooms() {
  const project = `${form.options.domain}/${$("#launch-project").value}`;
  const shown = form.options.policies.filter((p) => p.level !== "project" || p.target === project);
  $("#launch-policies tbody").replaceChildren(...shown.map((p) => {
    const tr = document.createElement("tr");
    tr.dataset.level = p.level;
    const sessions = p.max_sessions === null ? `${p.sessions}` : `${p.sessions} of ${p.max_sessions}`;
    for (const text of [`${p.level} (${p.target})`, sessions, amounts(p.total), amounts(p.held),
      p.remaining ? amounts(p.remaining) : "no limit"]) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.append(td);
    }
    return tr;
  }));
}

function typeChosen() {
  const batch = $('input[name="launch-type"]:checked').value === "batch";
  $("#launch-command").required = batch;
  $("#launch-command-label").hidden = !batch;
}

async function answer(response) {
  const text = await response.text();
  const body = text ? JSON.parse(text) : null;
  if (!response.ok) throw new Error(body?.detail || response.statusText);
  return body;
}

async function load() {
  try {
    form.csrf = (await answer(await fetch("/ui/session", { credentials: "same-origin" }))).csrf;
    form.options = await answer(await fetch("/v1/launch-options", { credentials: "same-origin" }));
  } catch (e) {
    $("#launch-result").textContent = `cannot launch: ${e.message}`;
    return;
  }
  fill();
  try {
    const folders = await answer(await fetch("/v1/vfolders", { credentials: "same-origin" }));
    $("#launch-mounts").replaceChildren(...folders.filter((f) => f.access).map((f) => {
      const label = document.createElement("label");
      const box = document.createElement("input");
      box.type = "checkbox";
      box.value = f.name;
      box.name = "launch-mount";
      label.append(box, ` ${f.name} (${f.access})`);
      return label;
    }));
  } catch (e) {
    $("#launch-mounts").textContent = "no folders here";
  }
  $("#launch").hidden = false;
  document.body.dataset.launchReady = "1";
}

async function launch(ev) {
  ev.preventDefault();
  if (form.busy) return;
  form.busy = true;
  const result = $("#launch-result");
  result.className = "muted";
  result.textContent = "asking…";
  const batch = $('input[name="launch-type"]:checked').value === "batch";
  const command = $("#launch-command").value.trim();
  form.requestId = form.requestId || `w${crypto.randomUUID().replaceAll("-", "")}`.slice(0, 33);
  const body = {
    image: $("#launch-image").value,
    project: $("#launch-project").value,
    group: $("#launch-group").value,
    session_type: batch ? "batch" : "interactive",
    command: batch && command ? ["sh", "-c", command] : [],
    mounts: [...document.querySelectorAll('input[name="launch-mount"]:checked')].map((b) => b.value),
    count: Number($("#launch-count").value),
    name: $("#launch-name").value.trim() || null,
    fgpu: $("#launch-fgpu").value,
    cpu: $("#launch-cpu").value,
    mem: `${Math.round(Number($("#launch-mem").value) * 1024)}m`,
    request_id: form.requestId,
  };
  try {
    const response = await fetch("/ui/sessions", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": form.csrf },
      body: JSON.stringify(body),
      credentials: "same-origin",
    });
    const out = await answer(response);
    form.requestId = null; // taken: the next launch is another request
    const ids = out.sessions.map((s) => s.id).join(", ");
    if (out.refused) {
      result.className = "error";
      result.textContent = `refused: ${out.refused}`;
    } else {
      result.className = "ok";
      result.textContent = out.decided ? `launched ${ids}` : `asked for ${ids}; not judged yet`;
    }
    result.dataset.sessions = ids;
    form.options = await answer(await fetch("/v1/launch-options", { credentials: "same-origin" }));
    rooms();
  } catch (e) {
    result.className = "error";
    result.textContent = e.message; // the same request id is sent again on a retry
  } finally {
    form.busy = false;
  }
}

function signedInChanged() {
  if (document.body.dataset.signedIn) {
    if (!form.options) load();
  } else {
    form.options = null;
    form.csrf = null;
    $("#launch").hidden = true;
    document.body.dataset.launchReady = "";
  }
}

$("#launch-form").addEventListener("submit", launch);
$("#launch-project").addEventListener("change", () => { fillGroups(); rooms(); });
$("#launch-group").addEventListener("change", groupChosen);
$("#launch-preset").addEventListener("change", presetChosen);
for (const radio of document.querySelectorAll('input[name="launch-type"]')) {
  radio.addEventListener("change", typeChosen);
}
new MutationObserver(signedInChanged).observe(document.body, {
  attributes: true, attributeFilter: ["data-signed-in"],
});
typeChosen();
signedInChanged();
