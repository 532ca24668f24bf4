// A terminal in a session: xterm.js (vendor/, from npm by `make web`) over a WebSocket to
// this host, which opens the session's shell channel as the signed-in user
// (services/api/ui_session.py). Binary messages carry the terminal's bytes both ways; a
// text message {"resize": [rows, cols]} resizes it. Each opening asks first for a
// one-time ticket, by a POST that carries the CSRF token: reconnecting asks again.

import { Terminal } from "./vendor/xterm.mjs";
import { FitAddon } from "./vendor/addon-fit.mjs";

// xterm's DOM renderer writes the cells' measured size and its theme into <style>
// elements it makes (document.createElement("style"), then only their textContent and
// remove()); a Content-Security-Policy without 'unsafe-inline' refuses a <style> element as
// soon as it joins the page, even an empty one or one of another type (Chromium checks the
// policy first), and says so. So xterm gets an inert <template> instead, which is never
// rendered nor checked, and the rules it writes go into a constructed style sheet (the
// CSSOM, which the policy allows) that the document adopts and that goes with the element.
const createElement = document.createElement.bind(document);
document.createElement = (tag, options) => {
  if (String(tag).toLowerCase() !== "style") return createElement(tag, options);
  const node = createElement("template");
  const sheet = new CSSStyleSheet();
  let text = "";
  document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
  Object.defineProperty(node, "textContent", {
    get: () => text,
    set: (value) => { text = String(value); sheet.replaceSync(text); },
  });
  const remove = node.remove.bind(node);
  node.remove = () => {
    document.adoptedStyleSheets = document.adoptedStyleSheets.filter((s) => s !== sheet);
    remove();
  };
  return node;
};

const encoder = new TextEncoder();

// The terminal of `sessionId` in `box`; `call` is the page's fetch (with its CSRF token),
// `status(text, open)` is told how the connection stands. Returns { connect, close }.
export function terminal(box, sessionId, call, status) {
  const term = new Terminal({ cursorBlink: true, fontFamily: "ui-monospace, monospace", fontSize: 14 });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(box);
  fit.fit();
  let socket = null;

  const send = (data) => { if (socket && socket.readyState === WebSocket.OPEN) socket.send(data); };
  term.onData((data) => send(encoder.encode(data)));
  term.onBinary((data) => send(Uint8Array.from(data, (c) => c.charCodeAt(0))));
  term.onResize(({ rows, cols }) => send(JSON.stringify({ resize: [rows, cols] })));
  const resized = new ResizeObserver(() => fit.fit());
  resized.observe(box);

  async function connect() {
    if (socket) socket.close();
    socket = null;
    status("opening…", false);
    let ticket;
    try {
      ({ ticket } = await call("POST", `/ui/sessions/${encodeURIComponent(sessionId)}/shell-ticket`));
    } catch (e) {
      status(`not opened: ${e.message}`, false);
      return;
    }
    const url = new URL(`/ui/sessions/${encodeURIComponent(sessionId)}/shell`, location.href);
    url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
    url.searchParams.set("ticket", ticket);
    url.searchParams.set("rows", term.rows);
    url.searchParams.set("cols", term.cols);
    const ws = new WebSocket(url);
    ws.binaryType = "arraybuffer";
    socket = ws;
    ws.onopen = () => { status("open", true); term.focus(); };
    ws.onmessage = (m) => { if (m.data instanceof ArrayBuffer) term.write(new Uint8Array(m.data)); };
    ws.onclose = (ev) => {
      if (socket !== ws) return;
      socket = null;
      status(`closed: ${ev.reason || `code ${ev.code}`}`, false);
    };
  }

  function close() {
    resized.disconnect();
    if (socket) socket.close();
    socket = null;
    term.dispose();
  }

  return { connect, close };
}
