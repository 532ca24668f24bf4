// GPU usage as the sessions list and a session's page show it: each device's fGPU share
// and the memory its last usage sample counted against the slice. Samples come on the
// viewer's own event stream (gpu.usage-sampled); the read API's session shape holds the
// last one of each device (gpu_memory), so a page shows them before the next comes.

export const USAGE_EVENT = "gpu.usage-sampled.v1";

const GIB = 2 ** 30;

// A device's GPU memory as its last usage sample counted it, against the slice.
function memoryText(m) {
  return ` · ${(m.used / GIB).toFixed(1)} / ${(m.limit / GIB).toFixed(1)} GiB`;
}

// Each device with its fGPU share and, once the agent has sampled it, the memory in use
// against the slice: `gpu0 0.5 · 1.2 / 8.0 GiB`.
export function devices(s) {
  if (!s.devices.length) return s.requested.fgpu === "0" ? "no GPU" : `${s.requested.fgpu} asked`;
  const memory = new Map((s.gpu_memory || []).map((m) => [m.gpu, m]));
  return s.devices.map((d) => {
    const m = memory.get(d.gpu);
    return `gpu${d.gpu} ${d.fgpu}${m ? memoryText(m) : ""}`;
  }).join(", ");
}

// A usage sample (gpu.usage-sampled, from the viewer's own event stream) folded into
// session `s` as its read shape holds it; whether it changed what `s` shows.
export function sampled(s, data) {
  if (!s || !s.holds_allocation || !s.devices.some((d) => d.gpu === data.gpu_index)) return false;
  const m = { gpu: data.gpu_index, used: data.mem_used, limit: data.mem_limit, at: data.at };
  s.gpu_memory = (s.gpu_memory || []).filter((x) => x.gpu !== m.gpu).concat([m]);
  return true;
}
