// The administrators' page's image allow-lists and aliases (admin.js draws the rest): the
// table as GET /v1/image-policies shows this administrator, and the changes `fgpu admin
// images allow|allow-all|alias|unalias` make, each its own request (/ui/admin/images/...,
// ui_admin_images.py) that the registrar judges: a domain's admins and superadmins may.
// An allow-list is set whole, as the log holds it: edit fills the form with the list as
// read, and an entry's remove sends that list without it. Image names are hostile input:
// set as text, and sent back only inside JSON bodies and encoded paths.

const $ = (selector) => document.querySelector(selector);
let act = null; // admin.js's write, given by wire()
const RESULT = "#admin-images-result";

function entries(list) {
  return list.split(/[\s,]+/).filter(Boolean);
}

// The allow-lists' table, a row a domain.
export function imagesTable(el, policies) {
  $("#admin-images tbody").replaceChildren(...policies.map((p) => el("tr", {
    "data-domain": p.domain },
  el("td", {}, p.domain),
  el("td", { class: "allowed" }, p.images === null ? "every image" : p.images.length ? null
    : "no image", ...(p.images || []).map((image) => el("span", { class: "entry",
    "data-image": image }, image, el("button", { type: "button", class: "remove-image",
    title: `no longer allow ${image}`, onclick: () => disallow(p, image) }, "×")))),
  el("td", { class: "aliases" }, ...Object.entries(p.aliases).map(([alias, image]) => el("span", {
    class: "entry", "data-alias": alias }, `${alias} → ${image}`, el("button", {
    type: "button", class: "remove-alias", title: `remove alias ${alias}`,
    onclick: () => unalias(p.domain, alias) }, "×")))),
  el("td", {}, el("button", { type: "button", class: "edit-images",
    onclick: () => edit(p) }, "edit")))));
}

function edit(p) {
  $("#admin-images-domain").value = p.domain;
  $("#admin-images-list").value = (p.images || []).join(", ");
  $("#admin-alias-domain").value = p.domain;
  $(RESULT).textContent = p.images === null
    ? `${p.domain} may run any image: the images listed will be all it may run`
    : `${p.domain}'s allow-list as it holds: add or remove entries, then set it`;
  $("#admin-images-list").focus();
}

function setList(domain, images) {
  return act("POST", `/ui/admin/images/${encodeURIComponent(domain)}`, { images }, RESULT);
}

async function allow(ev) {
  ev.preventDefault();
  const images = entries($("#admin-images-list").value);
  const domain = $("#admin-images-domain").value.trim();
  if (!images.length && !confirm(`An empty allow-list: ${domain} may run no image. Set it?`)) {
    return;
  }
  await setList(domain, images);
}

async function allowAny() {
  const domain = $("#admin-images-domain").value.trim();
  if (!domain) {
    $(RESULT).className = "error";
    $(RESULT).textContent = "which domain?";
    return;
  }
  await setList(domain, null);
}

async function disallow(p, image) {
  const rest = p.images.filter((i) => i !== image);
  const then = rest.length ? "" : ` Its list is then empty: ${p.domain} may run no image.`;
  if (!confirm(`No longer allow ${image} in ${p.domain}?${then}`)) return;
  await setList(p.domain, rest);
}

async function setAlias(ev) {
  ev.preventDefault();
  const domain = $("#admin-alias-domain").value.trim();
  await act("POST", `/ui/admin/images/${encodeURIComponent(domain)}/aliases`, {
    alias: $("#admin-alias-name").value.trim(), image: $("#admin-alias-image").value.trim(),
  }, RESULT);
}

async function unalias(domain, alias) {
  if (!confirm(`Remove alias ${alias} of ${domain}?`)) return;
  // An alias may hold a "/": each part encoded, the slashes kept (the route takes a path).
  const path = alias.split("/").map(encodeURIComponent).join("/");
  await act("DELETE", `/ui/admin/images/${encodeURIComponent(domain)}/aliases/${path}`,
    undefined, RESULT);
}

// Wire the forms: `write(method, path, body, result)` is admin.js's (the answer shown in
// `result`, the tables read again).
export function wire(write) {
  act = write;
  $("#admin-images-form").addEventListener("submit", allow);
  $("#admin-images-any").addEventListener("click", allowAny);
  $("#admin-alias-form").addEventListener("submit", setAlias);
}
