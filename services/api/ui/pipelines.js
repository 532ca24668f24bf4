// The Pipelines page: the user's runs (GET /v1/pipelines, as `fgpu pipeline ls`: a user
// its own, a domain admin its domain's) and one run's DAG (#/pipelines/ID, GET
// /v1/pipelines/{id}, as `fgpu pipeline info`): tasks as boxes coloured by state
// (dag.js, the picture the audit console draws too). Read again when the event stream
// brings news of sessions or runs while it is shown.

import { dagPicture } from "./dag.js";

const $ = (selector) => document.querySelector(selector);
const page = { ctx: null, run: null, shown: false };

// The events after which the page is read again (the stream sends a viewer those it sees).
export const PIPELINE_EVENTS = [
  "pipeline.run-requested.v1", "pipeline.tasks-requested.v1", "pipeline.tasks-ended.v1",
  "pipeline.retry-scheduled.v1", "pipeline.run-cancelled.v1", "pipeline.rerun-started.v1",
  "pipeline.run-ended.v1",
];

function time(iso) {
  return iso ? iso.replace("T", " ").replace(/\.\d+/, "").replace(/(Z|\+00:00)$/, "") : "";
}

function problem(e) {
  const ctx = page.ctx;
  if (e instanceof ctx.Unauthorized) ctx.signedOut(e.message);
  else $("#pipelines-problem").textContent = e.message;
}

function runRow(r) {
  const { el } = page.ctx;
  const counts = new Map();
  for (const t of r.tasks) counts.set(t.status, (counts.get(t.status) || 0) + 1);
  const tasks = [...counts].map(([status, n]) => `${n} ${status}`).join(", ");
  return el("tr", { "data-run": r.run_id },
    el("td", { class: "id" }, el("a", { href: `#/pipelines/${encodeURIComponent(r.run_id)}` }, r.run_id)),
    el("td", { class: "name" }, r.name),
    el("td", { class: "status" }, r.status),
    el("td", { class: "tasks" }, tasks),
    el("td", { class: "when" }, time(r.requested_at)));
}

async function loadRuns() {
  const found = await page.ctx.call("GET", "/v1/pipelines");
  $("#pipeline-table tbody").replaceChildren(...found.runs.map(runRow));
  $("#pipelines-empty").hidden = found.runs.length > 0;
}

async function loadRun() {
  const run = await page.ctx.call("GET", `/v1/pipelines/${encodeURIComponent(page.run)}`);
  $("#pipeline-title-name").textContent = `${run.name} (${run.run_id})`;
  $("#pipeline-state").textContent =
    `${run.status}${run.reason ? `: ${run.reason}` : ""}, round ${run.round}`;
  $("#pipeline-dag").replaceChildren(dagPicture(run));
  document.body.dataset.dagShown = `${run.run_id}:${run.status}`;
}

// Show the runs (`run` null) or run `run`'s DAG; `ctx` holds the page's helpers.
export async function show(run, ctx) {
  page.ctx = ctx;
  page.run = run;
  page.shown = true;
  $("#pipelines").hidden = false;
  $("#pipeline-list").hidden = run !== null;
  $("#pipeline").hidden = run === null;
  $("#pipelines-problem").textContent = "";
  await refresh();
}

export async function refresh() {
  if (!page.shown) return;
  try {
    if (page.run === null) await loadRuns();
    else await loadRun();
  } catch (e) { problem(e); }
}

export function hide() {
  $("#pipelines").hidden = true;
  page.shown = false;
  page.run = null;
}
