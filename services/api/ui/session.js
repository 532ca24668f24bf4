// One session's page: its details and its story (the read API's, as the console tells
// it), its output followed live (/ui/sessions/{id}/logs, asked of its agent as the user),
// a terminal in it (terminal.js, loaded when first opened) and its apps (apps.js, listed
// again as it starts or stops running). Every text from the log or the container is set
// as text, never parsed as HTML.

import { listApps } from "./apps.js";

import { devices, sampled as fold } from "./usage.js";

const $ = (selector) => document.querySelector(selector);

const page = { id: null, logs: null, term: null, ctx: null, session: null };

function details(s, ctx) {
  const { el } = ctx;
  page.session = s;
  const pairs = [
    ["status", s.status], ["name", s.name || ""], ["image", s.image], ["fGPU", devices(s)],
    ["agent", s.agent || ""], ["owner", s.owner],
  ];
  $("#session-details").replaceChildren(...pairs.flatMap(([k, v]) => [
    el("dt", {}, k), el("dd", { "data-field": k }, v)]));
  const was = document.body.dataset.sessionStatus;
  document.body.dataset.sessionStatus = s.status;
  $("#terminal-open").disabled = s.status !== "RUNNING";
  if (s.status !== was && (s.status === "RUNNING" || was === "RUNNING")) listApps(page.id, ctx);
}

// The details and the story, read again (each session event the page follows calls it).
export async function refresh() {
  const ctx = page.ctx;
  if (!page.id || !ctx) return;
  const id = page.id;
  try {
    const h = await ctx.call("GET", `/v1/sessions/${encodeURIComponent(id)}/history`);
    if (page.id !== id) return;
    details(h.session, ctx);
    $("#session-summary").textContent = h.summary;
    $("#session-story").replaceChildren(...h.story.map((line) =>
      ctx.el("li", { class: line.effect ? "" : "no-effect", "data-seq": line.seq },
        ctx.el("span", { class: "when" }, `${line.at.replace("T", " ").slice(0, 19)} `),
        `${line.actor}: ${line.text}`)));
    $("#session-problem").textContent = "";
  } catch (e) {
    if (e instanceof ctx.Unauthorized) return ctx.signedOut(e.message);
    $("#session-problem").textContent = e.message;
  }
}

// The output as the container writes it: `reset` starts it again from empty (each time
// the stream opens, its EventSource reconnecting after a `problem` too), each `output`
// appends a piece, `end` says the output has ended. Set as text: it is the container's.
function followLogs(id) {
  const box = $("#session-logs");
  box.textContent = "";
  $("#logs-status").textContent = "asking its agent…";
  const stream = new EventSource(`/ui/sessions/${encodeURIComponent(id)}/logs`);
  page.logs = stream;
  stream.addEventListener("reset", () => {
    box.textContent = "";
    $("#logs-status").textContent = "live";
  });
  stream.addEventListener("output", (m) => {
    const atEnd = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
    box.append(JSON.parse(m.data).text);
    if (atEnd) box.scrollTop = box.scrollHeight;
  });
  stream.addEventListener("problem", (m) => {
    $("#logs-status").textContent = JSON.parse(m.data).error;
  });
  stream.addEventListener("end", (m) => {
    const ended = JSON.parse(m.data);
    $("#logs-status").textContent = `${ended.reason} (${ended.status})`;
    document.body.dataset.logs = "ended";
    stream.close();
  });
  stream.onerror = () => {
    if (stream.readyState === EventSource.CLOSED) $("#logs-status").textContent = "not followed";
  };
}

async function openTerminal() {
  const ctx = page.ctx;
  const id = page.id;
  const { terminal } = await import("./terminal.js");
  if (page.id !== id) return;
  if (!page.term) {
    page.term = terminal($("#terminal"), id, ctx.call, (text, open) => {
      $("#terminal-status").textContent = text;
      document.body.dataset.terminal = open ? "open" : "closed";
      $("#terminal-open").textContent = open ? "reconnect" : "open a terminal";
    });
  }
  $("#terminal").scrollIntoView({ block: "nearest" });
  await page.term.connect();
}

// A usage sample of the viewer's (ui.js hears them all): shown if it is this session's.
export function sampled(data) {
  const s = page.session;
  if (!s || s.id !== data.session_id || !fold(s, data)) return;
  const field = document.querySelector('#session-details dd[data-field="fGPU"]');
  if (field) field.textContent = devices(s);
}

// Show session `id`; `ctx` holds the page's helpers (call, el, Unauthorized, signedOut).
export function show(id, ctx) {
  hide();
  document.body.dataset.logs = "";
  page.id = id;
  page.ctx = ctx;
  $("#session-id").textContent = id;
  $("#session-details").replaceChildren();
  $("#session-story").replaceChildren();
  $("#session-summary").textContent = "";
  $("#terminal-status").textContent = "";
  $("#terminal-open").textContent = "open a terminal";
  $("#session").hidden = false;
  followLogs(id);
  refresh();
}

// Leave the session's page: its logs stop, its terminal closes.
export function hide() {
  if (page.logs) page.logs.close();
  if (page.term) page.term.close();
  page.logs = null;
  page.term = null;
  page.id = null;
  page.session = null;
  $("#session").hidden = true;
  document.body.dataset.terminal = "";
  document.body.dataset.sessionStatus = "";
  $("#apps").replaceChildren();
  $("#apps-status").textContent = "";
}

$("#terminal-open").addEventListener("click", () => {
  openTerminal().catch((e) => { $("#terminal-status").textContent = e.message; });
});
