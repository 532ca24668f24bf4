// The Folders page: the folders the user sees (GET /v1/vfolders, as `fgpu vfolder ls`),
// a new one (POST /ui/vfolders) and a share (POST /ui/vfolders/{id}/share), each the
// user's own request that the registrar judges, its refusal shown as the log gave it;
// one folder's files (#/folders/ID/DIR...): browse, download (a link: the file comes as
// an attachment, never a page of this origin), remove, rename, and upload in chunks with
// progress and resume (upload.js). Every name is set as text, never parsed as HTML.

import { Refused, fileUrl, send, stat } from "./upload.js";

const $ = (selector) => document.querySelector(selector);
const page = { ctx: null, folder: null, dir: "", folders: [], busy: false, choice: null };

function bytes(n) {
  if (n === null || n === undefined) return "no limit";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return i ? `${v.toFixed(1)} ${units[i]}` : `${n} B`;
}

function hashOf(folder, dir) {
  const parts = [folder, ...(dir ? dir.split("/") : [])].map(encodeURIComponent);
  return `#/folders/${parts.join("/")}`;
}

function requestId() {
  return `w${crypto.randomUUID().replaceAll("-", "")}`.slice(0, 33);
}

function problem(e) {
  const ctx = page.ctx;
  if (e instanceof ctx.Unauthorized) ctx.signedOut(e.message);
  else $("#folders-problem").textContent = e.message;
}

// ---- the folders ------------------------------------------------------------------------

function folderRow(f) {
  const { el } = page.ctx;
  const shares = Object.entries(f.shares).map(([k, v]) => `${k} (${v})`).join(", ");
  return el("tr", { "data-folder": f.id },
    el("td", { class: "name" }, el("a", { href: hashOf(f.id, ""), class: "open" }, f.name)),
    el("td", { class: "owner" }, f.user || f.project),
    el("td", { class: "access" }, f.access || "manage"),
    el("td", { class: "usage" }, `${bytes(f.bytes)} of ${bytes(f.quota_bytes)}`),
    el("td", { class: "files" }, String(f.files)),
    el("td", { class: "shares" }, shares));
}

async function loadFolders() {
  page.folders = await page.ctx.call("GET", "/v1/vfolders");
  $("#folder-table tbody").replaceChildren(...page.folders.map(folderRow));
  $("#folders-empty").hidden = page.folders.length > 0;
  document.body.dataset.folders = String(page.folders.length);
}

// An admin request's answer, said in `out`: applied, refused (the log's reason), or not
// judged yet. Whether it was applied.
function said(out, answer, done) {
  out.dataset.requestId = answer.request_id;
  if (answer.applied) {
    out.className = "ok";
    out.textContent = done;
  } else {
    out.className = "error";
    out.textContent = answer.decided
      ? `refused (${answer.code}): ${answer.refused}` : "asked; not answered yet";
  }
  return answer.applied;
}

async function create(ev) {
  ev.preventDefault();
  const out = $("#folder-create-result");
  out.className = "muted";
  out.textContent = "asking…";
  const form = ev.target;
  form.dataset.requestId ||= requestId(); // a retry of the same form is the same request
  const body = {
    name: $("#folder-name").value.trim(),
    quota: $("#folder-quota").value.trim() || null,
    request_id: form.dataset.requestId,
  };
  try {
    const answer = await page.ctx.call("POST", "/ui/vfolders", body);
    delete form.dataset.requestId;
    if (said(out, answer, `folder ${body.name} created`)) $("#folder-name").value = "";
    await loadFolders();
  } catch (e) {
    out.className = "error";
    out.textContent = e.message;
  }
}

// ---- one folder ---------------------------------------------------------------------------

function fileRow(entry, f) {
  const { el } = page.ctx;
  const path = page.dir ? `${page.dir}/${entry.name}` : entry.name;
  let link;
  if (entry.kind === "dir") {
    link = el("a", { href: hashOf(f.id, path), class: "dir" }, `${entry.name}/`);
  } else {
    const url = fileUrl(f.id, path);
    link = el("a", { href: url, download: entry.name, class: "download" }, entry.name);
  }
  const act = (name, onclick) => (f.access === "rw"
    ? el("button", { type: "button", class: name, onclick }, name) : null);
  return el("tr", { "data-name": entry.name, "data-kind": entry.kind },
    el("td", { class: "name" }, link),
    el("td", { class: "size" }, entry.kind === "dir" ? "" : bytes(entry.size)),
    el("td", { class: "at" }, entry.mtime.replace("T", " ").slice(0, 19)),
    el("td", { class: "act" },
      act("rename", () => rename(f, path)), act("remove", () => remove(f, path, entry.kind))));
}

function crumbs(f) {
  const { el } = page.ctx;
  const parts = page.dir ? page.dir.split("/") : [];
  const links = [el("a", { href: hashOf(f.id, "") }, f.name)];
  parts.forEach((p, i) => {
    links.push(" / ", el("a", { href: hashOf(f.id, parts.slice(0, i + 1).join("/")) }, p));
  });
  $("#folder-path").replaceChildren(...links);
}

async function loadFiles() {
  const f = page.folders.find((x) => x.id === page.folder);
  if (!f) throw new Error(`no folder ${page.folder} of yours or shared with you`);
  $("#folder-title-name").textContent = f.name;
  const may = { rw: "you may read and write", ro: "you may read" };
  $("#folder-access").textContent = may[f.access] || "you manage it (share it to read it)";
  $("#upload-form").hidden = f.access !== "rw";
  crumbs(f);
  if (!f.access) return;
  const q = `?path=${encodeURIComponent(page.dir)}`;
  const entries = await page.ctx.call("GET", `/v1/vfolders/${encodeURIComponent(f.id)}/files${q}`);
  $("#file-table tbody").replaceChildren(...entries.map((e) => fileRow(e, f)));
  $("#files-empty").hidden = entries.length > 0;
  document.body.dataset.files = entries.map((e) => e.name).join("/");
}

async function remove(f, path, kind) {
  if (!window.confirm(`Remove ${path}${kind === "dir" ? " and all it holds" : ""}?`)) return;
  const q = kind === "dir" ? "?recursive=true" : "";
  try {
    await page.ctx.call("DELETE", `${fileUrl(f.id, path)}${q}`);
    await loadFiles();
  } catch (e) { problem(e); }
}

async function rename(f, path) {
  const to = window.prompt(`Rename ${path} to`, path);
  if (!to || to === path) return;
  const q = new URLSearchParams({ path, to });
  try {
    await page.ctx.call("POST", `/v1/vfolders/${encodeURIComponent(f.id)}/move?${q}`);
    await loadFiles();
  } catch (e) { problem(e); }
}

async function share(ev) {
  ev.preventDefault();
  const out = $("#share-result");
  out.className = "muted";
  out.textContent = "asking…";
  const who = $("#share-who").value.trim();
  const kind = $("#share-kind").value;
  const body = { [kind]: who, access: $("#share-access").value, request_id: requestId() };
  try {
    const url = `/ui/vfolders/${encodeURIComponent(page.folder)}/share`;
    const answer = await page.ctx.call("POST", url, body);
    said(out, answer, `shared with ${kind} ${who} (${body.access})`);
    await loadFolders();
  } catch (e) {
    out.className = "error";
    out.textContent = e.message;
  }
}

// ---- uploading ----------------------------------------------------------------------------

function shown(sent, total) {
  $("#upload-progress").max = total || 1;
  $("#upload-progress").value = total ? sent : 1;
  $("#upload-status").textContent = `${bytes(sent)} of ${bytes(total)}`;
}

// Where to start: 0, or, when the server holds what an earlier upload of this name left
// (a cut, a reload), where the user chooses to resume it.
async function startAt(path, file) {
  const there = await stat(page.folder, path);
  if (!there.partial || there.partial > file.size) return 0;
  $("#upload-status").textContent = `an upload of ${path} stopped after ${bytes(there.partial)}`;
  $("#upload-choice").hidden = false;
  const resume = await new Promise((resolve) => { page.choice = resolve; });
  $("#upload-choice").hidden = true;
  return resume ? there.partial : 0;
}

async function upload(ev) {
  ev.preventDefault();
  const file = $("#upload-file").files[0];
  if (!file || page.busy) return;
  page.busy = true;
  const path = page.dir ? `${page.dir}/${file.name}` : file.name;
  const status = $("#upload-status");
  const chunks = [];
  status.className = "muted";
  try {
    const offset = await startAt(path, file);
    if (offset) status.dataset.resumedAt = String(offset);
    const done = await send({
      folder: page.folder, path, file, offset, replace: $("#upload-replace").checked,
      csrf: page.ctx.csrf(),
      progress: (sent, chunkStart) => {
        if (chunkStart !== null) chunks.push(chunkStart);
        status.dataset.chunks = chunks.join(",");
        shown(sent, file.size);
      },
    });
    shown(file.size, file.size);
    status.className = "ok";
    const resumed = offset ? `, resumed after ${bytes(offset)}` : "";
    status.textContent = `${path}: ${bytes(done.size)} uploaded${resumed}`;
    await loadFolders();
    await loadFiles();
  } catch (e) {
    status.className = "error";
    status.textContent = e instanceof Refused ? `${path}: ${e.message}` : e.message;
    if (e instanceof page.ctx.Unauthorized) page.ctx.signedOut(e.message);
  } finally {
    page.busy = false;
  }
}

// ---- the page -----------------------------------------------------------------------------

// Show the folders (`folder` null), or folder `folder` at directory `dir`; `ctx` holds
// the page's helpers (call, el, csrf, Unauthorized, signedOut).
export async function show(folder, dir, ctx) {
  page.ctx = ctx;
  page.folder = folder;
  page.dir = dir;
  $("#folders").hidden = false;
  $("#folder-list").hidden = folder !== null;
  $("#folder").hidden = folder === null;
  $("#folders-problem").textContent = "";
  document.body.dataset.filesShown = "";
  try {
    await loadFolders();
    if (folder !== null) await loadFiles();
    document.body.dataset.filesShown = folder === null ? "" : `${folder}/${dir}`;
  } catch (e) { problem(e); }
}

export function hide() {
  $("#folders").hidden = true;
  page.folder = null;
}

$("#folder-create").addEventListener("submit", create);
$("#share-form").addEventListener("submit", share);
$("#upload-form").addEventListener("submit", upload);
$("#upload-resume").addEventListener("click", () => page.choice && page.choice(true));
$("#upload-anew").addEventListener("click", () => page.choice && page.choice(false));
