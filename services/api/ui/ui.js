// The researchers' web UI: the read API and the user's own requests, shown. No framework,
// nothing fetched from elsewhere, every text from the log set as text (never as HTML).
// Signed in by a browser session: an HttpOnly cookie the page never sees, and a CSRF
// token every write carries (services/api/ui.py). One session's page is session.js's,
// reached from a row of the list (#/sessions/ID); the administrators' pages are admin.js's
// (#/admin), linked from the header for administrators only.

import * as adminPage from "./admin.js";
import * as folderPage from "./folders.js";
import * as pipelinePage from "./pipelines.js";
import * as servingPage from "./serving.js";
import * as sessionPage from "./session.js";
import { USAGE_EVENT, devices, sampled } from "./usage.js";

const $ = (selector) => document.querySelector(selector);
const LIVE = ["REQUESTED", "PENDING", "SCHEDULED", "PREPARING", "PULLING", "RUNNING", "TERMINATING"];
const ENDED = ["TERMINATED", "CANCELLED", "ERROR", "REJECTED"];
const SHOWN = { live: LIVE, ended: ENDED, all: [] };
const PAGE = 50;
// The events that change a session's row (tests/api/test_ui.py checks none is missing).
export const SESSION_EVENTS = [
  "session.requested.v1", "session.admitted.v1", "session.rejected.v1", "session.queued.v1",
  "session.unplaced.v1", "session.scheduled.v1", "session.preparing.v1", "session.pulling.v1",
  "session.running.v1", "session.terminating.v1", "session.terminated.v1",
  "session.cancelled.v1", "session.errored.v1", "session.lost.v1",
  "session.destroy-requested.v1", "session.destroy-rejected.v1",
];

const state = {
  csrf: null, who: null, show: "live", offset: 0, stream: null, loading: false, again: false,
  shown: new Map(), // the sessions of the page shown, by id
};

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("data-")) node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const child of children) {
    // Strings become text nodes: nothing from the log is ever parsed as HTML.
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

class Unauthorized extends Error {}

async function call(method, path, body) {
  const headers = {};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && state.csrf) headers["X-CSRF-Token"] = state.csrf;
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
  });
  const text = await response.text();
  const answer = text ? JSON.parse(text) : null;
  if (response.status === 401) throw new Unauthorized(answer?.detail || "sign in");
  if (!response.ok) throw new Error(answer?.detail || response.statusText);
  return answer;
}

function say(text) {
  $("#error").textContent = text || "";
}

// ---- signing in and out ---------------------------------------------------------------

function signedOut(why) {
  state.csrf = null;
  state.who = null;
  if (state.stream) state.stream.close();
  state.stream = null;
  sessionPage.hide();
  adminPage.hide();
  folderPage.hide();
  pipelinePage.hide();
  servingPage.hide();
  $("#sessions").hidden = true;
  $("#nav").hidden = true;
  $("#sign-out").hidden = true;
  $("#nav-admin").hidden = true;
  $("#who").textContent = "";
  $("#sign-in").hidden = false;
  $("#sign-in-error").textContent = why || "";
  document.body.dataset.signedIn = "";
}

function signedIn(session) {
  state.csrf = session.csrf;
  const who = session.identity;
  state.who = who;
  $("#nav-admin").hidden = !adminPage.isAdministrator(who); // the routes refuse others too
  $("#who").textContent = `${who.user} (${who.role}, ${who.domain})`;
  $("#sign-in").hidden = true;
  $("#sign-in-error").textContent = "";
  $("#sign-out").hidden = false;
  $("#nav").hidden = false;
  document.body.dataset.signedIn = who.user;
  state.offset = 0;
  route();
  load().then(follow);
}

// ---- which page: the list, one session (#/sessions/ID), the folders (#/folders, one
// folder's directory: #/folders/ID/DIR...), the pipeline runs (#/pipelines[/ID]), the
// endpoints (#/serving[/NAME]), or administration (#/admin) ----------------------------

const CTX = {
  call, el, Unauthorized, signedOut: (why) => signedOut(why), csrf: () => state.csrf,
};

function route() {
  if (!state.csrf) return;
  const session = location.hash.match(/^#\/sessions\/([A-Za-z0-9_-]+)$/);
  const folders = location.hash.match(/^#\/folders(?:\/([A-Za-z0-9_-]+)((?:\/[^/]+)*))?\/?$/);
  const admin = location.hash.match(/^#\/admin(?:\/([a-z]+))?$/);
  const pipelines = location.hash.match(/^#\/pipelines(?:\/([A-Za-z0-9_-]+))?\/?$/);
  const serving = location.hash.match(/^#\/serving(?:\/([A-Za-z0-9_.-]+))?\/?$/);
  const page = session ? "session" : folders ? "folders" : admin ? "admin"
    : pipelines ? "pipelines" : serving ? "serving" : "sessions";
  document.body.dataset.page = page;
  $("#sessions").hidden = page !== "sessions";
  if (!session) sessionPage.hide();
  if (!folders) folderPage.hide();
  if (!admin) adminPage.hide();
  if (!pipelines) pipelinePage.hide();
  if (!serving) servingPage.hide();
  if (pipelines) pipelinePage.show(pipelines[1] || null, CTX);
  if (serving) servingPage.show(serving[1] || null, CTX);
  if (session) sessionPage.show(session[1], CTX);
  if (folders) {
    const dir = (folders[2] || "").split("/").filter(Boolean).map(decodeURIComponent).join("/");
    folderPage.show(folders[1] || null, dir, CTX);
  }
  if (admin) adminPage.show(CTX, state.who, admin[1]);
}

async function signIn(ev) {
  ev.preventDefault();
  try {
    const session = await call("POST", "/ui/session", {
      access_key: $("#sign-in-key").value.trim(),
      secret_key: $("#sign-in-secret").value,
    });
    $("#sign-in-secret").value = "";
    signedIn(session);
  } catch (e) {
    $("#sign-in-error").textContent = e.message;
  }
}

async function signOut() {
  try {
    await call("DELETE", "/ui/session");
  } catch (e) {
    if (!(e instanceof Unauthorized)) return say(e.message);
  }
  signedOut("signed out");
}

// ---- the sessions -----------------------------------------------------------------------

function why(s) {
  if (s.status === "PENDING" || s.status === "REQUESTED") return s.waiting || "";
  return s.reason || "";
}

function row(s) {
  const ended = ENDED.includes(s.status);
  const action = ended ? "" : el("button", {
    type: "button",
    class: "terminate",
    onclick: () => terminate(s),
    "data-session": s.id,
  }, "terminate");
  const link = el("a", { href: `#/sessions/${encodeURIComponent(s.id)}`, class: "open" }, s.id);
  const tr = el("tr", { "data-session": s.id, "data-status": s.status, class: "clickable" },
    el("td", { class: "sid" }, link),
    el("td", { class: "name" }, s.name || ""),
    el("td", { class: "status" }, s.status),
    el("td", { class: "image" }, s.image),
    el("td", { class: "devices" }, devices(s)),
    el("td", { class: "agent" }, s.agent || ""),
    el("td", { class: "why" }, why(s)),
    el("td", { class: "at" }, (s.times.requested || "").replace("T", " ").slice(0, 19)),
    el("td", { class: "act" }, action));
  if (ended) tr.dataset.ended = "";
  // The whole row opens the session's page; its id is the link a keyboard reaches.
  tr.addEventListener("click", (ev) => {
    if (!ev.target.closest("button, a")) location.hash = `#/sessions/${encodeURIComponent(s.id)}`;
  });
  return tr;
}

async function load() {
  if (state.loading) {
    state.again = true; // one more load once this one is done: nothing is missed
    return;
  }
  state.loading = true;
  try {
    do {
      state.again = false;
      const url = new URL("/v1/sessions", location.origin);
      for (const status of SHOWN[state.show]) url.searchParams.append("status", status);
      url.searchParams.set("limit", PAGE);
      url.searchParams.set("offset", state.offset);
      const page = await call("GET", url.pathname + url.search);
      render(page);
    } while (state.again);
  } catch (e) {
    if (e instanceof Unauthorized) signedOut(e.message);
    else say(e.message);
  } finally {
    state.loading = false;
  }
}

function render(page) {
  state.shown = new Map(page.sessions.map((s) => [s.id, s]));
  $("#session-table tbody").replaceChildren(...page.sessions.map(row));
  $("#empty").hidden = page.sessions.length > 0;
  const last = page.offset + page.sessions.length;
  $("#page-info").textContent = page.total ? `${page.offset + 1}–${last} of ${page.total}` : "";
  $("#prev").disabled = page.offset === 0;
  $("#next").disabled = last >= page.total;
  state.seq = Math.max(state.seq || 0, page.last_seq);
  document.body.dataset.seq = String(state.seq);
}

// Live: the read API's event stream (server-sent events, resumed by the browser after the
// last event it got; the viewer's own events only); each session event loads the page
// shown again, each usage sample updates its row. No polling.
function follow() {
  if (state.stream || !state.csrf) return;
  const stream = new EventSource(`/v1/events/stream?after=${state.seq || 0}`);
  state.stream = stream;
  stream.onopen = () => { $("#live-status").textContent = "live"; };
  for (const type of SESSION_EVENTS) {
    stream.addEventListener(type, () => {
      load(); sessionPage.refresh(); adminPage.refresh(); pipelinePage.refresh();
      servingPage.refresh(); // an endpoint's replicas are sessions
    });
  }
  for (const type of pipelinePage.PIPELINE_EVENTS) {
    stream.addEventListener(type, () => pipelinePage.refresh());
  }
  for (const type of servingPage.SERVING_EVENTS) {
    stream.addEventListener(type, () => servingPage.refresh());
  }
  // A usage sample changes one cell: it is set in place (samples come every few seconds
  // for every running session; the page is not read again for them).
  stream.addEventListener(USAGE_EVENT, (m) => {
    const event = JSON.parse(m.data);
    const data = { ...event.data, at: event.at };
    const s = state.shown.get(data.session_id);
    if (sampled(s, data)) {
      const cell = document.querySelector(`tr[data-session="${CSS.escape(s.id)}"] td.devices`);
      if (cell) cell.textContent = devices(s);
    }
    sessionPage.sampled(data);
  });
  stream.onerror = async () => {
    $("#live-status").textContent = "reconnecting…";
    if (stream.readyState !== EventSource.CLOSED) return;
    state.stream = null;
    try {
      signedIn(await call("GET", "/ui/session")); // refused for good: is it still us?
    } catch (e) {
      if (e instanceof Unauthorized) signedOut(e.message);
      else say(e.message);
    }
  };
}

// ---- terminating ------------------------------------------------------------------------

function terminate(s) {
  const dialog = $("#confirm");
  if (dialog.open) return;
  $("#confirm-session").textContent = s.name ? `${s.id} (${s.name})` : s.id;
  dialog.returnValue = "";
  dialog.onclose = async () => {
    if (dialog.returnValue !== "yes") return;
    try {
      await call("POST", `/ui/sessions/${encodeURIComponent(s.id)}/terminate`);
      say("");
    } catch (e) {
      if (e instanceof Unauthorized) signedOut(e.message);
      else say(`terminate ${s.id}: ${e.message}`);
    }
  };
  dialog.showModal();
}

// ---- start --------------------------------------------------------------------------------

$("#sign-in-form").addEventListener("submit", signIn);
$("#sign-out").addEventListener("click", signOut);
window.addEventListener("hashchange", route);
for (const radio of document.querySelectorAll('input[name="show"]')) {
  radio.addEventListener("change", () => {
    state.show = radio.value;
    state.offset = 0;
    load();
  });
}
$("#prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - PAGE); load(); });
$("#next").addEventListener("click", () => { state.offset += PAGE; load(); });

call("GET", "/ui/session").then(signedIn, (e) => signedOut(e instanceof Unauthorized ? "" : e.message))
  .finally(() => { document.body.dataset.ready = "1"; });
