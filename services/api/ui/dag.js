// A pipeline run's DAG as a picture: each task a box in the column of its depth (the
// longest chain of dependencies before it), coloured by its state, with a line from each
// dependency to it. Pure DOM (an SVG element, every text set as text): the web UI's
// pipelines page and the audit console draw the same picture from the read API's run
// shape (GET /v1/pipelines/{id}, its tasks each after those they depend on).

const SVG = "http://www.w3.org/2000/svg";
const BOX = { w: 150, h: 38, dx: 40, dy: 12 };

// Each task's column (its depth) and row (its place in the column), by name; the tasks
// are in the run's order, each after those it depends on, so one pass does.
export function layout(tasks) {
  const place = new Map();
  const rows = [];
  for (const t of tasks) {
    const deps = t.dependencies.filter((d) => place.has(d));
    const column = deps.length ? Math.max(...deps.map((d) => place.get(d).column)) + 1 : 0;
    rows[column] = (rows[column] || 0) + 1;
    place.set(t.name, { column, row: rows[column] - 1 });
  }
  return place;
}

function node(tag, attrs, text) {
  const n = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, String(v));
  if (text !== undefined) n.textContent = text;
  return n;
}

// The picture of `run` (the read API's shape): an <svg> with one <g class="dag-task
// dag-STATUS" data-task=NAME> per task, its title saying the task's attempt and session.
export function dagPicture(run) {
  const place = layout(run.tasks);
  const columns = Math.max(0, ...[...place.values()].map((p) => p.column)) + 1;
  const rows = Math.max(0, ...[...place.values()].map((p) => p.row)) + 1;
  const x = (p) => p.column * (BOX.w + BOX.dx);
  const y = (p) => p.row * (BOX.h + BOX.dy);
  const svg = node("svg", {
    class: "dag", role: "img", "aria-label": `the tasks of run ${run.run_id}`,
    width: columns * (BOX.w + BOX.dx), height: rows * (BOX.h + BOX.dy),
  });
  for (const t of run.tasks) {
    const to = place.get(t.name);
    for (const d of t.dependencies) {
      const from = place.get(d);
      if (!from) continue;
      svg.append(node("line", {
        class: "dag-edge", x1: x(from) + BOX.w, y1: y(from) + BOX.h / 2, x2: x(to), y2: y(to) + BOX.h / 2,
      }));
    }
  }
  for (const t of run.tasks) {
    const p = place.get(t.name);
    const g = node("g", { class: `dag-task dag-${t.status}`, "data-task": t.name, "data-status": t.status });
    const session = t.session_id ? `, session ${t.session_id} ${t.session_status || ""}` : "";
    g.append(node("title", {}, `${t.name}: ${t.status}, attempt ${t.attempt}/${t.max_attempts}${session}${t.reason ? ` (${t.reason})` : ""}`));
    g.append(node("rect", { x: x(p), y: y(p), width: BOX.w, height: BOX.h, rx: 4 }));
    g.append(node("text", { x: x(p) + 6, y: y(p) + 15, class: "dag-name" }, t.name));
    g.append(node("text", { x: x(p) + 6, y: y(p) + 31, class: "dag-status" }, t.status));
    svg.append(g);
  }
  return svg;
}
