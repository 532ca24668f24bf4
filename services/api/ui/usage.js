// GPU usage as the sessions list and a session's page show it: each device's fGPU share,
// the memory its last usage sample counted against the slice, and how busy the session
// kept it between its last two samples. Samples come on the viewer's own event stream
// (gpu.usage-sampled); the read API's session shape holds the last one of each device
// (gpu_memory, with its `busy` and the counter it came from), so a page shows them before
// the next comes and takes the next rate from there.

export const USAGE_EVENT = "gpu.usage-sampled.v1";

const GIB = 2 ** 30;

// A device's GPU memory as its last usage sample counted it, against the slice, and how
// busy it was kept (when known): ` · 1.5 / 8.0 GiB · busy 24 %`.
function memoryText(m) {
  const memory = ` · ${(m.used / GIB).toFixed(1)} / ${(m.limit / GIB).toFixed(1)} GiB`;
  return m.busy == null ? memory : `${memory} · busy ${Math.round(m.busy * 100)} %`;
}

// Each device with its fGPU share and, once the agent has sampled it, the memory in use
// against the slice and how busy: `gpu0 0.5 · 1.2 / 8.0 GiB · busy 24 %`.
export function devices(s) {
  if (!s.devices.length) return s.requested.fgpu === "0" ? "no GPU" : `${s.requested.fgpu} asked`;
  const memory = new Map((s.gpu_memory || []).map((m) => [m.gpu, m]));
  return s.devices.map((d) => {
    const m = memory.get(d.gpu);
    return `gpu${d.gpu} ${d.fgpu}${m ? memoryText(m) : ""}`;
  }).join(", ");
}

// The part of the device's time (0 to 1) charged between two samples of it: the charged
// time's growth over the time between them, as the read API's query computes it
// (projections.queries.busy_between). null where either lacks the counter (a whole
// device is not counted) or they are not apart in time.
export function busyBetween(before, after) {
  if (!before || before.charged_ns == null || after.charged_ns == null) return null;
  const wallNs = (Date.parse(after.at) - Date.parse(before.at)) * 1e6;
  if (!(wallNs > 0)) return null;
  return Math.min(1, Math.max(0, (after.charged_ns - before.charged_ns) / wallNs));
}

// A usage sample (gpu.usage-sampled, from the viewer's own event stream) folded into
// session `s` as its read shape holds it, its busy time against the device's previous
// sample; whether it changed what `s` shows.
export function sampled(s, data) {
  if (!s || !s.holds_allocation || !s.devices.some((d) => d.gpu === data.gpu_index)) return false;
  const before = (s.gpu_memory || []).find((x) => x.gpu === data.gpu_index);
  if (before && Date.parse(before.at) >= Date.parse(data.at)) return false; // not newer
  const m = {
    gpu: data.gpu_index,
    used: data.mem_used,
    limit: data.mem_limit,
    at: data.at,
    charged_ns: data.charged_ns ?? null,
  };
  m.busy = busyBetween(before, m);
  s.gpu_memory = (s.gpu_memory || []).filter((x) => x.gpu !== m.gpu).concat([m]);
  return true;
}
