// A session's apps: the services its image declares (asked of its agent as the user, for
// the session's owner alone), each opened in a window of its own on the apps origin with
// a one-time ticket (docs/architecture.md, "Apps through the proxy"). Names are set as
// text: the image's labels are its author's.

const $ = (selector) => document.querySelector(selector);

// List the apps of session `id`; `ctx` holds the page's helpers (call, el, ...).
export async function listApps(id, ctx) {
  const status = $("#apps-status");
  $("#apps").replaceChildren();
  status.textContent = "asking its agent…";
  try {
    const found = await ctx.call("GET", `/ui/sessions/${encodeURIComponent(id)}/apps`);
    $("#apps").replaceChildren(...found.apps.map((app) => item(id, app, ctx)));
    status.textContent = found.error || (found.apps.length ? "" : "its image declares none");
  } catch (e) {
    if (e instanceof ctx.Unauthorized) return ctx.signedOut(e.message);
    status.textContent = e.message;
  }
}

function item(id, app, ctx) {
  const button = ctx.el("button", { type: "button" }, "open");
  button.addEventListener("click", () => {
    open(id, app.name, ctx).catch((e) => { $("#apps-status").textContent = e.message; });
  });
  return ctx.el("li", {},
    ctx.el("span", { class: "app-name" }, app.name), ` ${app.protocol}:${app.port} `, button);
}

async function open(id, name, ctx) {
  // The window opens on the click (one opened after an await is a blocked pop-up), and
  // is cut from this page before the app's content comes (no window.opener to navigate).
  const win = window.open("about:blank", "_blank");
  if (win) win.opener = null;
  try {
    const path = `/ui/sessions/${encodeURIComponent(id)}/apps/${encodeURIComponent(name)}/ticket`;
    const { url } = await ctx.call("POST", path);
    if (win) win.location.href = url;
    else window.location.assign(url);
  } catch (e) {
    if (win) win.close();
    throw e;
  }
}
