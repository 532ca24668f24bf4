"""The contract of the agent's GPU watch's ports, met by the real adapters and the fakes alike.

``NvmlProcessWatch`` (pynvml) runs against the fake ``libnvidia-ml.so.1`` of tests/shim, in a
child process whose library path finds it (pynvml opens the library by name, once per
process); ``FakeGpuWatch`` is told the same figures. ``CgroupContainers`` reads cgroup files
as the kernel writes them (here under a stand-in ``/proc``; against real containers in
tests/e2e/test_gpu_watch_container.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from services.adapters.proc_cgroups import CgroupContainers
from services.ports import GpuProcessWatch, GpuWatchUnavailable
from services.testing import FakeContainers, FakeGpuWatch
from tests.support.shim_kit import ROOT, build_fake_nvml

HELD = [(0, 111, 3 << 30), (1, 222, 5 << 30), (1, 333, 1 << 20)]
SAMPLED = [(0, 111, 40), (0, 111, 60), (1, 222, 100)]
BUSY = {0: 97, 1: 50}  # per cent

# What a look at the figures above returns, through either adapter: processes,
# then the samples, then the samples again (none: each is handed out once).
EXPECTED = {
    "processes": sorted(HELD),
    "samples": sorted(SAMPLED),
    "again": [],
    "busy": {g: pct / 100 for g, pct in BUSY.items()},
}

_LOOK = """
import json
from services.adapters.gpu_probe import NvmlProcessWatch
from services.ports import GpuWatchUnavailable
w = NvmlProcessWatch()
try:
    out = {"processes": sorted([p.gpu_index, p.pid, p.mem] for p in w.processes())}
    out["samples"] = sorted([s.gpu_index, s.pid, s.sm_percent] for s in w.utilisation())
    out["again"] = [[s.gpu_index, s.pid, s.sm_percent] for s in w.utilisation()]
    out["busy"] = w.busy()
    w.close()
except GpuWatchUnavailable as e:
    out = {"unavailable": str(e)}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def fake_nvml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fake_nvml(tmp_path_factory.mktemp("nvml")).parent


def through_nvml(lib_dir: Path, figures: Path, **fake: str) -> dict[str, object]:
    """A look through NvmlProcessWatch in a child process finding NVML in ``lib_dir``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML_")}
    env.update(PYTHONPATH=str(ROOT), FAKE_NVML_PROCS_FILE=str(figures), FAKE_NVML_DEVICES="2")
    env.update(LD_LIBRARY_PATH=str(lib_dir), **fake)
    done = subprocess.run(
        [sys.executable, "-c", _LOOK], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, object] = json.loads(done.stdout)
    return out


def look(watch: GpuProcessWatch) -> dict[str, object]:
    return {
        "processes": sorted((p.gpu_index, p.pid, p.mem) for p in watch.processes()),
        "samples": sorted((s.gpu_index, s.pid, s.sm_percent) for s in watch.utilisation()),
        "again": [(s.gpu_index, s.pid, s.sm_percent) for s in watch.utilisation()],
        "busy": watch.busy(),
    }


def figures_file(path: Path) -> Path:
    lines = [f"proc {g} {p} {m}" for g, p, m in HELD]
    lines += [f"util {g} {p} {sm} {t}" for t, (g, p, sm) in enumerate(SAMPLED, start=1)]
    lines += [f"busy {g} {pct} 0" for g, pct in BUSY.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def as_lists(d: dict[str, object]) -> dict[str, object]:
    return json.loads(json.dumps(d))  # type: ignore[no-any-return]


def test_nvml_lists_the_drivers_figures(fake_nvml: Path, tmp_path: Path) -> None:
    assert through_nvml(fake_nvml, figures_file(tmp_path / "f")) == as_lists(EXPECTED)


def test_the_fake_lists_what_it_is_told() -> None:
    fake = FakeGpuWatch()
    for gpu, pid, mem in HELD:
        fake.hold(gpu, pid, mem)
    for gpu, pid, sm in SAMPLED:
        fake.sample(gpu, pid, sm)
    for gpu, pct in BUSY.items():
        fake.set_busy(gpu, pct / 100)
    assert as_lists(look(fake)) == as_lists(EXPECTED)


def test_no_driver_is_unavailable_not_a_crash(fake_nvml: Path, tmp_path: Path) -> None:
    out = through_nvml(fake_nvml, figures_file(tmp_path / "f"), FAKE_NVML_NO_DRIVER="1")
    assert "list the GPUs' processes" in str(out["unavailable"])
    fake = FakeGpuWatch()
    fake.unavailable = "no driver"
    for call in (fake.processes, fake.utilisation, fake.busy):
        with pytest.raises(GpuWatchUnavailable):
            call()


# ---- which container a process is in ---------------------------------------------------

CID = "70ba87bfc749c20a89f94a2981b22942be6878a0616d5a07e218736b85a47577"
INNER = "0123456789abcdef" * 4
CGROUPS = {
    # cgroup v1, Docker's cgroupfs driver (every hierarchy names it)
    101: f"12:memory:/docker/{CID}\n11:pids:/docker/{CID}\n0::/docker/{CID}\n",
    # cgroup v2, the systemd driver
    102: f"0::/system.slice/docker-{CID}.scope\n",
    # containerd under Kubernetes
    103: f"0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-{CID}.scope\n",
    # a container in a container: outermost first
    104: f"0::/docker/{CID}/docker/{INNER}\n",
    # a host process, and a 64-character name that is no id
    105: "0::/user.slice/user-0.slice/session-1.scope\n",
    106: f"0::/system.slice/{'x' * 64}.service\n",
}


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    for pid, text in CGROUPS.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    ("pid", "expected"),
    [(101, (CID,)), (102, (CID,)), (103, (CID,)), (104, (CID, INNER)), (105, ()), (106, ())],
    ids=["cgroupfs", "systemd", "containerd", "nested", "host", "not-an-id"],
)
def test_a_processs_cgroup_names_its_containers(
    proc: Path, pid: int, expected: tuple[str, ...]
) -> None:
    assert CgroupContainers(str(proc)).containers_of(pid) == expected


@pytest.mark.parametrize("make", [lambda p: CgroupContainers(str(p)), lambda p: FakeContainers()])
def test_a_process_that_is_gone_is_in_no_container(
    proc: Path, make: Callable[[Path], CgroupContainers | FakeContainers]
) -> None:
    assert make(proc).containers_of(999_999) == ()
