// A file sent into a folder in chunks, resumable: the storage service's own route
// (PUT /v1/vfolders/{id}/files/{path}?offset=N&total=T, services/api/vfolder_routes.py),
// as `fgpu vfolder upload` sends it. Each chunk goes from where the server says the
// upload stands; the file takes its name only once its T bytes are all there, so a cut
// (the network, a reload) never leaves a short file, and the next try goes on from what
// the server holds (its stat's `partial`) rather than from the start.

export const CHUNK = 4 * 1024 * 1024;
const RETRIES = 5; // tries of one chunk cut by the network before giving up

export class Refused extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

// The storage route of file `path` (slash-separated) of folder `folder`, each name quoted.
export function fileUrl(folder, path) {
  const names = path.split("/").map(encodeURIComponent).join("/");
  return `/v1/vfolders/${encodeURIComponent(folder)}/files/${names}`;
}

// What the server holds of `path`: { size, partial } (null: none).
export async function stat(folder, path) {
  const url = `/v1/vfolders/${encodeURIComponent(folder)}/stat?path=${encodeURIComponent(path)}`;
  const response = await fetch(url, { credentials: "same-origin" });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Refused(response.status, body.detail || response.statusText);
  return body;
}

// One chunk, by XMLHttpRequest (fetch tells nothing of a body's progress). Resolves with
// the answer; rejects with Refused (the server's word) or a TypeError (the network).
function putChunk(url, blob, csrf, progress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("PUT", url);
    xhr.setRequestHeader("X-CSRF-Token", csrf);
    xhr.setRequestHeader("Content-Type", "application/octet-stream");
    xhr.upload.onprogress = (ev) => progress(ev.loaded);
    xhr.onload = () => {
      let body = {};
      try { body = JSON.parse(xhr.responseText); } catch { /* not JSON: said below */ }
      if (xhr.status >= 200 && xhr.status < 300) resolve(body);
      else reject(new Refused(xhr.status, body.detail || `${xhr.status} ${xhr.statusText}`));
    };
    xhr.onerror = () => reject(new TypeError("the network failed"));
    xhr.onabort = () => reject(new TypeError("stopped"));
    xhr.send(blob);
  });
}

const pause = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

// Send `file` to `path` of `folder` from `offset` (0: anew; else where the server's stat
// says an earlier upload stopped). `progress(sent, chunkStart)` is told as bytes go.
// Resolves with the last answer (the file whole); rejects with Refused.
export async function send({ folder, path, file, offset, replace, csrf, progress }) {
  let at = offset;
  let cuts = 0;
  do {
    const end = Math.min(at + CHUNK, file.size);
    const params = new URLSearchParams({ offset: at, total: file.size, replace: String(replace) });
    const url = `${fileUrl(folder, path)}?${params}`;
    const start = at;
    progress(start, start);
    try {
      const blob = file.slice(start, end);
      const answer = await putChunk(url, blob, csrf, (n) => progress(start + n, null));
      cuts = 0;
      if (answer.partial === null || answer.partial === undefined) return answer;
      at = answer.partial;
    } catch (e) {
      if (e instanceof Refused && e.status < 500) throw e;
      if (++cuts > RETRIES) throw new Refused(0, `${e.message}: try again to resume`);
      await pause(500 * 2 ** cuts);
      // Cut mid-chunk: the server kept what came; go on from there, as it says.
      const there = await stat(folder, path);
      if (there.partial === null && there.size === file.size) return { size: there.size };
      at = there.partial ?? 0;
    }
  } while (true);
}
