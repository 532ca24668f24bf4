// The audit console's pipeline runs: those the reader sees (GET /v1/pipelines: a user its
// own, a domain admin its domain's, a superadmin all) in a list, and the chosen one's DAG
// drawn as the web UI draws it (/ui/assets/dag.js). Read with the console's token.

import { dagPicture } from "/ui/assets/dag.js";
import { get, whenSignedIn } from "/console/read.js";

const $ = (selector) => document.querySelector(selector);

async function listRuns() {
  const page = await get("/v1/pipelines");
  const select = $("#pipeline-run");
  const chosen = select.value;
  const options = page.runs.map((r) => {
    const o = document.createElement("option");
    o.value = r.run_id;
    o.textContent = `${r.run_id} ${r.name} (${r.status})`;
    return o;
  });
  select.replaceChildren(select.options[0], ...options);
  select.value = chosen;
}

async function showRun(id) {
  const run = await get(`/v1/pipelines/${encodeURIComponent(id)}`);
  $("#pipeline-state").textContent =
    `${run.name}: ${run.status}${run.reason ? ` (${run.reason})` : ""}, round ${run.round}, owner ${run.owner}`;
  const box = $("#pipeline-dag");
  box.replaceChildren(dagPicture(run));
  box.hidden = false;
  box.dataset.run = `${run.run_id}:${run.status}`;
}

function said(error) {
  $("#pipeline-state").textContent = String(error.message || error);
}

$("#pipeline-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const id = $("#pipeline-run").value;
  if (id) showRun(id).catch(said);
});
$("#pipeline-run").addEventListener("focus", () => listRuns().catch(said));
whenSignedIn(() => listRuns().catch(said));
