"""nvidia-smi's view of the slice: the libnvidia-ml.so.1 stand-in over a fake NVML.

The fake answers as a host whose GPUs are busy with other tenants (16 GiB, 4-5 GiB
used, two foreign processes, 77 % busy), so every number the client prints tells
whether it came from the slice or from the real library.  The session's processes
are the cudart-like harness holding memory through the CUDA shim in the same region.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.support.shim_kit import GIB, MIB, Kit, NvmlKit, read_line, running

INSUFFICIENT_SIZE = 7
UNINITIALIZED = 1
LIBRARY_NOT_FOUND = 12
VERSION_MISMATCH = 25
EPOCH_NS = 1 << 30
REAL_TOTAL = 16 * GIB
FOREIGN = [[70001, GIB], [70002, 2 * GIB]]  # the fake's other tenants on device 0


def show(nvml: NvmlKit, env: dict[str, str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The client's header line and one line per device (the closing line checked here)."""
    lines = nvml.run("show", env=env)
    head, devices, tail = lines[0], lines[1:-1], lines[-1]
    assert (head["init"], head["count_rc"]) == (0, 0)
    assert tail == {
        "export_table": {"rc": 0, "value": "fake export table"},  # private table: forwarded
        "shutdown": 0,
        "after_shutdown": UNINITIALIZED,
    }
    return head, devices


def test_nvidia_smi_sees_the_slice_and_the_sessions_processes(
    kit: Kit, nvml: NvmlKit, state: Path, tmp_path: Path
) -> None:
    env = nvml.env(kit.env(state=state, region=tmp_path / "region", mem_limit="4GiB,2GiB"))
    with running(kit, "hold", str(GIB), env=env) as holder:
        assert read_line(holder)["rc"] == 0
        head, (dev0, dev1) = show(nvml, env)
    lib = str(kit.shim_lib / "libnvidia-ml.so.1")
    assert head["library"] == head["mem_lib"] == head["temp_lib"] == lib  # dlsym finds the shim
    assert head["driver"] == "999.99"  # unhooked: the real library's answer
    assert dev0["mem"] == {"rc": 0, "total": 4 * GIB, "used": GIB, "free": 3 * GIB}
    assert dev0["mem_v2"] == {
        "rc": 0, "total": 4 * GIB, "reserved": 0, "used": GIB, "free": 3 * GIB,
    }  # fmt: skip
    assert dev0["mem_v2_bad_version"] == VERSION_MISMATCH  # the real library still checks
    assert dev1["mem"] == {"rc": 0, "total": 2 * GIB, "used": 0, "free": 2 * GIB}
    for key in ("compute_v1", "compute_v2", "compute_v3"):
        assert dev0[key] == {
            "probe": INSUFFICIENT_SIZE, "rc": 0, "count": 1, "procs": [[holder.pid, GIB]],
        }, key  # fmt: skip
        assert dev1[key] == {"probe": 0, "rc": 0, "count": 0, "procs": []}, key
    for key in ("graphics_v1", "graphics_v3", "mps_v3"):
        assert dev0[key] == {"probe": 0, "rc": 0, "count": 0, "procs": []}, key
    # No SM share: the session has the whole device, whose own figures are its own.
    assert dev0["util"] == {"rc": 0, "gpu": 77, "memory": 55}
    assert [d["temp"] for d in (dev0, dev1)] == [{"rc": 0, "value": 40}, {"rc": 0, "value": 41}]
    assert [d["name"] for d in (dev0, dev1)] == ["Fake GPU", "Fake GPU"]


def test_a_process_that_exited_or_freed_is_not_listed(
    kit: Kit, nvml: NvmlKit, state: Path, tmp_path: Path
) -> None:
    env = nvml.env(kit.env(state=state, region=tmp_path / "region", mem_limit="4GiB"))
    kit.run("exit", str(5 * MIB), env=env)  # gone, its bytes given back at exit
    kit.run("used", str(64 * MIB), env=env)  # allocated and freed
    _, (dev0, _) = show(nvml, env)
    assert dev0["compute_v3"]["procs"] == []
    assert dev0["mem"]["used"] == 0


def test_without_a_slice_every_answer_is_the_real_librarys(
    kit: Kit, nvml: NvmlKit, state: Path
) -> None:
    _, (dev0, dev1) = show(nvml, nvml.env(kit.env(state=state)))
    assert dev0["mem"] == {"rc": 0, "total": REAL_TOTAL, "used": 4 * GIB, "free": 12 * GIB}
    assert dev1["mem"]["used"] == 5 * GIB
    assert dev0["mem_v2"]["reserved"] == 256 * MIB
    assert dev0["compute_v3"]["procs"] == dev0["graphics_v3"]["procs"] == FOREIGN
    assert dev0["compute_v1"]["procs"] == FOREIGN
    assert dev0["util"] == {"rc": 0, "gpu": 77, "memory": 55}


def test_a_device_the_region_does_not_configure_is_real(
    kit: Kit, nvml: NvmlKit, state: Path, tmp_path: Path
) -> None:
    env = nvml.env(kit.env(state=state, region=tmp_path / "region", mem_limit="4GiB"))
    _, (dev0, dev1) = show(nvml, env)
    assert dev0["mem"]["total"] == 4 * GIB
    assert dev1["mem"] == {"rc": 0, "total": REAL_TOTAL, "used": 5 * GIB, "free": 11 * GIB}
    assert dev1["compute_v3"]["procs"] == [[70011, GIB], [70012, 2 * GIB]]


def test_total_is_never_above_the_real_device(
    kit: Kit, nvml: NvmlKit, state: Path, tmp_path: Path
) -> None:
    env = nvml.env(kit.env(state=state, region=tmp_path / "region", mem_limit="64GiB"), devices=1)
    _, (dev0,) = show(nvml, env)
    assert dev0["mem"] == {"rc": 0, "total": REAL_TOTAL, "used": 0, "free": REAL_TOTAL}


def test_process_lists_keep_nvmls_size_protocol(
    kit: Kit, nvml: NvmlKit, state: Path, tmp_path: Path
) -> None:
    env = nvml.env(kit.env(state=state, region=tmp_path / "region", mem_limit="4GiB"))
    with ExitStack() as stack:
        holders = []
        for _ in "ab":  # one after the other: a context is measured while none allocates
            holders.append(stack.enter_context(running(kit, "hold", str(MIB), env=env)))
            assert read_line(holders[-1])["rc"] == 0
        (small,) = nvml.run("small", env=env)
        _, (dev0, _) = show(nvml, env)
    assert small == {"rc": INSUFFICIENT_SIZE, "count": 2, "null_rc": INSUFFICIENT_SIZE}
    assert sorted(dev0["compute_v2"]["procs"]) == sorted([h.pid, MIB] for h in holders)


@pytest.mark.parametrize(
    ("busy_ns", "gpu", "memory"),
    [(EPOCH_NS // 4, 50, 50), (EPOCH_NS // 16, 12, 12), (EPOCH_NS, 100, 55), (0, 0, 0)],
    ids=["half-of-the-share", "an-eighth", "over-the-share-clamped", "idle"],
)
def test_utilisation_is_the_time_charged_against_the_share(
    kit: Kit, nvml: NvmlKit, state: Path, tmp_path: Path, busy_ns: int, gpu: int, memory: int
) -> None:
    """At share 0.5 an epoch offers half of it: a quarter charged is 50 %. Memory is the
    device's figure (55) but never above the session's own."""
    env = nvml.env(kit.env(state=state, region=tmp_path / "region", sm_share="0.5"))
    (r,) = nvml.run("busy", "0", str(busy_ns), env=env)
    assert (r["rc"], r["gpu"], r["memory"]) == (0, gpu, memory)


def test_utilisation_of_a_whole_device_is_the_devices(
    kit: Kit, nvml: NvmlKit, state: Path, tmp_path: Path
) -> None:
    env = nvml.env(kit.env(state=state, region=tmp_path / "region", sm_share="1"))
    (r,) = nvml.run("busy", "0", str(EPOCH_NS // 4), env=env)
    assert (r["rc"], r["gpu"], r["memory"]) == (0, 77, 55)


def test_paced_launches_show_as_utilisation(
    kit: Kit, nvml: NvmlKit, state: Path, tmp_path: Path
) -> None:
    """The CUDA shim charges each paced launch to the epoch NVML reads next."""
    env = nvml.env(kit.env(state=state, region=tmp_path / "region", sm_share="0.5"), devices=1)
    seen: list[int] = []
    with running(kit, "launch", "8", "3000000", env=env) as launcher:
        assert read_line(launcher) == {"started": True}
        # Wait for the first complete epoch with launches in it (about two epochs).
        while launcher.poll() is None and not any(seen):
            seen.append(show(nvml, env)[1][0]["util"]["gpu"])
    assert any(seen), seen
    assert all(0 <= g <= 100 for g in seen), seen


def test_without_the_real_library_nvml_says_so(
    kit: Kit, nvml: NvmlKit, state: Path, tmp_path: Path
) -> None:
    for real in (str(tmp_path / "missing.so"), str(kit.shim_lib / "libnvidia-ml.so.1")):
        env = nvml.env(kit.env(state=state, mem_limit="1G"), FGPU_REAL_LIBNVML=real)
        (r,) = nvml.run("noinit", env=env)
        assert r == {
            "mem_rc": LIBRARY_NOT_FOUND,  # a hook
            "init": LIBRARY_NOT_FOUND,  # a forward
            "message": "NVML Shared Library Not Found",
        }, real


def test_calls_before_init_are_the_real_librarys(kit: Kit, nvml: NvmlKit, state: Path) -> None:
    (r,) = nvml.run("noinit", env=nvml.env(kit.env(state=state, mem_limit="1G")))
    assert r == {"mem_rc": UNINITIALIZED, "init": 0, "message": "fake: Success"}
