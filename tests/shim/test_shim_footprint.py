"""What the driver takes for a process counts against the slice: its contexts and modules.

The fake GPU's contexts take FAKE_CUDA_CTX_BYTES while they live, its modules and
libraries FAKE_CUDA_MODULE_BYTES; the fake NVML counts them as used, as the real one
does.  The shim measures each by the device's free memory before and after.
"""

from __future__ import annotations

import os
import signal
import subprocess
from contextlib import ExitStack
from pathlib import Path

from gpu_shim import open_region
from tests.support.shim_kit import GIB, MIB, FakeDevice, Kit, NvmlKit, read_line, running

OOM = 2
CTX = 256 * MIB
HELD = 100 * MIB


def _env(kit: Kit, nvml: NvmlKit, state: Path, region: Path, limit: str) -> dict[str, str]:
    """A container's process on the fake GPU, the fake NVML as the real one."""
    base = kit.env(state=state, region=region, mem_limit=limit, FAKE_CUDA_CTX_BYTES=str(CTX))
    return nvml.env(base, devices=1)


def test_every_processs_context_counts_and_the_figures_add_up(
    kit: Kit, nvml: NvmlKit, state: Path, tmp_path: Path
) -> None:
    region = tmp_path / "region"
    env = _env(kit, nvml, state, region, "1GiB")
    with ExitStack() as stack:
        holders = []
        for _ in "ab":
            holders.append(stack.enter_context(running(kit, "hold", str(HELD), env=env)))
            assert read_line(holders[-1])["rc"] == 0
        with open_region(region) as r:
            assert r.device(0).in_use == 2 * (CTX + HELD)
            mine = {p.pid: p.bytes[0] for p in r.processes()}
            assert mine == {h.pid: CTX + HELD for h in holders}
        # A third process: its own context counts too, and free + used = total.
        info = kit.run("meminfo", env=env)[-1]
        assert info["total"] == info["device_total"] == GIB
        assert info["free"] == GIB - 3 * CTX - 2 * HELD
        # 200 MiB fit in what the allocations leave (824 MiB), not beside the contexts.
        lines = kit.run("used", str(200 * MIB), env=env)
        assert lines[0]["alloc"] == OOM
        assert lines[1]["free"] == GIB - 3 * CTX - 2 * HELD
        # nvidia-smi: one row per process, its allocations and context; the rows sum to used.
        dev0 = nvml.run("show", env=env)[1]
        rows = sorted(dev0["compute_v3"]["procs"])
        assert rows == sorted([h.pid, CTX + HELD] for h in holders)
        assert dev0["mem"]["used"] == sum(b for _, b in rows) == 2 * (CTX + HELD)
        assert dev0["mem"]["total"] == GIB
    # Both exited (killed): the agent's reclaim gives every byte back, contexts included.
    with open_region(region) as r:
        assert r.reclaim_dead() == 2 * (CTX + HELD)
        assert r.device(0).in_use == 0


def test_a_killed_processs_context_is_reclaimed(
    kit: Kit, nvml: NvmlKit, state: Path, tmp_path: Path
) -> None:
    region = tmp_path / "region"
    env = _env(kit, nvml, state, region, "1GiB")
    with running(kit, "hold", str(HELD), env=env) as victim:
        assert read_line(victim)["rc"] == 0
        with open_region(region) as r:
            assert r.reclaim_dead() == 0
            os.kill(victim.pid, signal.SIGKILL)
            victim.wait(timeout=30)
            assert r.reclaim_dead() == CTX + HELD
            assert r.device(0).in_use == 0


def test_a_context_that_does_not_fit_is_refused_and_released(
    kit: Kit, nvml: NvmlKit, state: Path, tmp_path: Path
) -> None:
    region = tmp_path / "region"
    env = _env(kit, nvml, state, region, "128MiB")
    proc = subprocess.run(
        [str(kit.harness), "meminfo"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 3
    assert '"retain":2' in proc.stdout
    assert FakeDevice.read(state).in_use[0] == 0  # the driver's context was released again
    with open_region(region) as r:
        dev = r.device(0)
        assert (dev.in_use, dev.refusals) == (0, 1)


def test_modules_libraries_and_created_contexts_count_while_they_live(
    kit: Kit, nvml: NvmlKit, state: Path, tmp_path: Path
) -> None:
    region = tmp_path / "region"
    module = 64 * MIB
    env = _env(kit, nvml, state, region, "1GiB") | {"FAKE_CUDA_MODULE_BYTES": str(module)}
    lines = kit.run("driverobjects", env=env)
    steps = {line["meminfo"]: line["free"] for line in lines if "meminfo" in line}
    rcs = {k: v for line in lines for k, v in line.items() if k != "meminfo" and "rc" not in line}
    assert rcs == {
        "module_load": 0, "library_load": 0, "unload": [0, 0], "ctx_create": 0, "ctx_destroy": 0,
    }  # fmt: skip
    start = GIB - CTX  # the primary context
    assert steps == {
        "start": start,
        "module": start - module,
        "library": start - 2 * module,
        "unloaded": start,
        "created": start - CTX,
        "destroyed": start,
    }


def test_without_a_real_nvml_a_context_is_charged_the_configured_estimate(
    kit: Kit, state: Path, tmp_path: Path
) -> None:
    region = tmp_path / "region"
    env = kit.env(state=state, region=region, mem_limit="1GiB", FGPU_CTX_BYTES=str(CTX))
    info = kit.run("used", str(HELD), env=env)[-1]
    assert info["free"] == GIB - CTX - HELD


def test_processes_starting_together_are_each_charged_their_own_footprint(
    kit: Kit, nvml: NvmlKit, state: Path, tmp_path: Path
) -> None:
    """Contexts and modules built at the same time by several processes of one container:
    each measurement must see only its own object, so every slot holds exactly its
    process's context, modules and allocation, in_use is their sum and what the driver
    holds, and nvidia-smi's rows add up to its header."""
    region = tmp_path / "region"
    module, loads, n = 16 * MIB, 3, 3
    env = _env(kit, nvml, state, region, "4GiB") | {
        "FAKE_CUDA_MODULE_BYTES": str(module),
        "FAKE_CUDA_CTX_DELAY_NS": str(40_000_000),  # each build overlaps the others'
    }
    own = CTX + 2 * loads * module + HELD
    with ExitStack() as stack:
        procs = [
            stack.enter_context(running(kit, "loadhold", str(loads), str(HELD), env=env))
            for _ in range(n)
        ]
        assert [read_line(p)["rc"] for p in procs] == [0] * n
        with open_region(region) as r:
            slots = {p.pid: p.bytes[0] for p in r.processes() if p.alive}
            in_use = r.device(0).in_use
        assert slots == {p.pid: own for p in procs}
        assert in_use == sum(slots.values()) == FakeDevice.read(state).in_use[0] == n * own
        dev0 = nvml.run("show", env=env)[1]
        rows = dev0["compute_v3"]["procs"]
        assert dev0["mem"]["used"] == sum(b for _, b in rows) == n * own
