// What the console's module sections share: a read API GET with the console's token (as
// console.js keeps it), and a start once console.js has signed in.

const TOKEN = "fgpu-token";

export async function get(path) {
  const token = sessionStorage.getItem(TOKEN);
  const response = await fetch(path, { headers: token ? { Authorization: `Bearer ${token}` } : {} });
  const body = await response.json();
  if (!response.ok) throw new Error(body.detail || response.statusText);
  return body;
}

// `start` once the page is ready (console.js sets body's data-ready once signed in).
export function whenSignedIn(start) {
  new MutationObserver((_, observer) => {
    if (document.body.dataset.ready !== "true") return;
    observer.disconnect();
    start();
  }).observe(document.body, { attributes: true, attributeFilter: ["data-ready"] });
}
