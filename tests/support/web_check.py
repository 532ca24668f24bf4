"""The web UI's seed check, end to end: the scenario issue 22 names, run by
``tests/e2e/test_ui_seed.py`` and by ``scripts/web-check`` alike, so the two cannot drift.

A researcher signs in, launches a 0.5-fGPU session with the slider on a node whose one GPU
is split into 2 fGPU, sees it RUNNING with ``gpu0 0.5``, opens its terminal, types
``nvidia-smi`` and reads the slice's total memory in the terminal; a second user sees none
of it (no row, no details, no terminal, his ticket refused); the researcher terminates it.

These machines have no GPU: as ``make demo`` does, the session's NVML is the shim's
(mounted by the agent, first on the library path) in front of a stand-in driver
(``shim_kit.build_fake_nvml``). ``smi_image`` makes, offline, an image of
``fgpu/python:bookworm`` (glibc) holding the stand-in, the nvidia-smi-like client and an
``nvidia-smi`` command on the PATH that prints what the client reads as nvidia-smi's table
does (``used MiB / total MiB``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from events import DevicePlacement, GpuInfo
from services.domain.gpu_slice import slices
from tests.support.ui_pages import SessionPage

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

__all__ = [
    "BASE_IMAGE",
    "GPU_MEM",
    "MIB",
    "Seed",
    "Steps",
    "chromium",
    "main",
    "remove_image",
    "run_seed",
    "seed_stack",
    "slice_total",
    "smi_image",
]

BASE_IMAGE = "fgpu/python:bookworm"
GIB, MIB = 1 << 30, 1 << 20
GPU_MEM = 16 * GIB  # the mock GPU's (fgpu up --gpu-mem 16g), the stand-in driver's too
FGPU_PER_GPU = 2
ASKED_QUANTA = 50  # 0.5 fGPU: five steps of the default group's quantum
SMI_DIR = "/opt/fgpu-smi"
WIDTH, HEIGHT = 1200, 900

# nvidia-smi as the researcher types it: the client's JSON read into nvidia-smi's table.
_SMI = """#!/usr/bin/env python3
import json, subprocess, sys
out = subprocess.run(["@DIR@/nvml-client", "show"], capture_output=True, text=True)
devices = [d for d in map(json.loads, filter(None, out.stdout.splitlines())) if "mem" in d]
if not devices:
    sys.exit("NVIDIA-SMI has failed: " + (out.stdout + out.stderr).strip())
print("+-----------------------------------------------------+")
print("| GPU  Name                   |      Memory-Usage      |")
print("|=====================================================|")
for d in devices:
    m = d["mem"]
    used, total = m["used"] >> 20, m["total"] >> 20
    print(f"| {d['index']:>3}  {d['name'][:22]:<22} | {used:>6}MiB / {total:>6}MiB |")
print("+-----------------------------------------------------+")
""".replace("@DIR@", SMI_DIR)


def slice_total(asked: int = ASKED_QUANTA) -> int:
    """The memory of a session holding ``asked`` quanta of the mock GPU, as the agent's
    slice gives it (bytes)."""
    gpu = GpuInfo(index=0, uuid="GPU-0", model="MockGPU", mem=GPU_MEM, sm_count=80)
    [part] = slices((DevicePlacement(gpu_index=0, fgpu=asked),), {0: gpu}, FGPU_PER_GPU * 100)
    return part.mem_limit


def _docker(*args: str) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def smi_image(tmp: Path) -> str:
    """A new image of BASE_IMAGE with ``nvidia-smi`` on its PATH over the stand-in driver
    (made offline with ``docker commit``; ``remove_image`` it after). Its command sleeps:
    an interactive session's container stays up until terminated."""
    from tests.support.shim_kit import build_fake_nvml, build_nvml_client

    tools = tmp / "smi"
    build_fake_nvml(tools / "driver")
    build_nvml_client(tools / "nvml-client")
    (tools / "nvidia-smi").write_text(_SMI)
    for exe in ("nvml-client", "nvidia-smi"):
        (tools / exe).chmod(0o755)
    name = f"fgpu/python-smi:{secrets.token_hex(4)}"
    box = _docker("create", BASE_IMAGE, "true")
    try:
        _docker("cp", f"{tools}/.", f"{box}:{SMI_DIR}")
        # Where nvidia-smi is: on the PATH of a login shell too (/etc/profile sets its own).
        _docker("cp", f"{tools}/nvidia-smi", f"{box}:/usr/bin/nvidia-smi")
        changes = (
            f"ENV FGPU_REAL_LIBNVML={SMI_DIR}/driver/libnvidia-ml.so.1",
            "ENV FAKE_NVML_DEVICES=1",
            f"ENV FAKE_NVML_TOTAL={GPU_MEM}",
            'CMD ["sleep", "infinity"]',
        )
        _docker("commit", *(f"--change={c}" for c in changes), box, name)
    finally:
        _docker("rm", "-f", box)
    return name


def remove_image(name: str) -> None:
    subprocess.run(["docker", "rmi", "-f", name], capture_output=True, timeout=120, check=False)


@dataclass
class Seed:
    """Where the scenario runs: the UI's address, the researcher's and the other user's
    keypairs (access key, secret), the image with nvidia-smi, where the browsers keep
    their profiles and where the screenshots go."""

    url: str
    researcher: tuple[str, str]
    other: tuple[str, str]
    image: str
    profiles: Path
    shots: Path
    names: tuple[str, str] = ("researcher", "other")


@dataclass
class Steps:
    """What the scenario found so far: each step's seconds, the session, the slice's total
    as read in the terminal (so a failure still reports the steps that passed)."""

    seconds: dict[str, float] = field(default_factory=dict)
    session: str = ""
    total: str = ""

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        start = time.monotonic()
        yield
        self.seconds[name] = round(time.monotonic() - start, 3)


Browser = Callable[[Path], "WebDriver"]


def run_seed(seed: Seed, browser: Browser, steps: Steps) -> None:
    """The scenario, step by step, filling ``steps``; raises AssertionError (or selenium's
    errors) at the first thing the user would not see."""
    driver = browser(seed.profiles / "researcher")
    try:
        page = SessionPage(driver, f"{seed.url}/")
        with steps.step("sign_in"):
            page.sign_in(*seed.researcher, seed.names[0])
            page.watch_csp()
        with steps.step("launch"):
            steps.session = _launch(page, seed.image)
        with steps.step("running"):
            _running(page, steps.session)
        driver.save_screenshot(str(seed.shots / "ui-seed-sessions.png"))
        with steps.step("terminal"):
            page.open(steps.session)
            page.open_terminal()
            page.until(lambda d: page.at_prompt(), "the shell's prompt")
        with steps.step("nvidia_smi"):
            steps.total = _nvidia_smi(page)
        driver.save_screenshot(str(seed.shots / "ui-terminal.png"))
        with steps.step("isolation"):
            _sees_none(seed, browser, steps.session)
        with steps.step("terminate"):
            _terminate(page, steps.session)
        assert page.csp_refusals() == [], page.csp_refusals()
    finally:
        driver.quit()


def _launch(page: SessionPage, image: str) -> str:
    """0.5 fGPU with the slider, on ``image``; the new session's id."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    d = page.d
    page.until(lambda d: d.execute_script("return document.body.dataset.launchReady"), "form")
    Select(d.find_element(By.ID, "launch-image")).select_by_value(image)
    slider = d.find_element(By.ID, "launch-fgpu-range")
    slider.send_keys(Keys.HOME)
    # Steps of the group's quantum (the administrator's) up to 0.5 fGPU.
    step = Decimal(slider.get_attribute("step") or "1")
    slider.send_keys(*[Keys.ARROW_RIGHT] * int(Decimal(ASKED_QUANTA) / 100 / step))
    shown = d.find_element(By.ID, "launch-fgpu").get_attribute("value")
    assert Decimal(shown or "0") == Decimal("0.5"), f"the slider says {shown} fGPU"
    d.find_element(By.ID, "launch-go").click()
    page.until(lambda d: page.css("#launch-result")[0].startswith("launched"), "launched")
    [sid] = page.attr("#launch-result", "data-sessions")
    return sid


def _running(page: SessionPage, sid: str) -> None:
    def shown(_: object) -> bool:
        status = dict(zip(page.rows(), page.css("#session-table td.status"), strict=True))
        devices = dict(zip(page.rows(), page.css("#session-table td.devices"), strict=True))
        # The placement, before any usage its agent samples (`` · 0.0 / 4.0 GiB ...``).
        placed = devices.get(sid, "").split(" · ")[0]
        return status.get(sid) == "RUNNING" and placed == "gpu0 0.5"

    page.until(shown, f"{sid} RUNNING with gpu0 0.5")


_USAGE = re.compile(r"(\d+)MiB / +(\d+)MiB")


def _nvidia_smi(page: SessionPage) -> str:
    """``nvidia-smi`` typed in the terminal; the total it shows, once it is the slice's."""
    want = f"{slice_total() // MIB}MiB"
    page.type("nvidia-smi\n")
    found: list[str] = []

    def shown(_: object) -> bool:
        found[:] = [f"{total}MiB" for _, total in _USAGE.findall(page.text())]
        return bool(found)

    page.until(shown, "nvidia-smi's table in the terminal")
    assert found == [want], f"nvidia-smi shows {found}; the slice is {want}: {page.text()}"
    return found[0]


def _sees_none(seed: Seed, browser: Browser, sid: str) -> None:
    """The other user: no row of it, no details, no terminal, his ticket refused."""
    driver = browser(seed.profiles / "other")
    try:
        page = SessionPage(driver, f"{seed.url}/")
        page.sign_in(*seed.other, seed.names[1])
        _show(page, "all")
        assert sid not in page.rows(), page.rows()
        page.d.execute_script("location.hash = arguments[0]", f"#/sessions/{sid}")
        page.until(lambda d: page.css("#session-problem") != [""], "a problem shown")
        assert page.css("#session-details dd") == []
        assert not page.d.find_element("id", "terminal-open").is_enabled()
        status = page.d.execute_async_script(_TICKET, sid)
        assert status == 404, status
    finally:
        driver.quit()


# Asked from his own page with his own CSRF token: the session is not even said to exist.
_TICKET = """
const done = arguments[arguments.length - 1];
const { csrf } = await (await fetch("/ui/session")).json();
const r = await fetch(`/ui/sessions/${arguments[0]}/shell-ticket`,
                      { method: "POST", headers: { "X-CSRF-Token": csrf } });
done(r.status);
"""


def _terminate(page: SessionPage, sid: str) -> None:
    page.d.find_element("id", "back").click()
    page.until(lambda d: sid in page.rows(), "back on the sessions list")
    page.terminate(sid)
    _show(page, "all")

    def ended(_: object) -> bool:
        status = dict(zip(page.rows(), page.css("#session-table td.status"), strict=True))
        return status.get(sid) == "TERMINATED"

    page.until(ended, f"{sid} TERMINATED")


def _show(page: SessionPage, which: str) -> None:
    """The sessions list filtered to ``which`` (running, ended, all)."""
    page.d.find_element("css selector", f'input[name="show"][value="{which}"]').click()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def seed_stack(tmp: Path, steps: Steps) -> Iterator[Seed]:
    """A fresh ``fgpu up`` under ``tmp`` (its own FGPU_HOME; one mock 16 GiB GPU worth 2
    fGPU; its UI on a free port), the researcher and another user of its default project,
    and the image with nvidia-smi; all removed after."""
    from tests.support.cli_stack import fgpu_up

    with steps.step("image"):
        image = smi_image(tmp)
    try:
        port = _free_port()
        with ExitStack() as stack:
            with steps.step("up"):  # fgpu up ready, its two users made
                users = ("researcher", "other")
                up = stack.enter_context(
                    fgpu_up(tmp / "home", "--api-port", str(port), users=users)
                )
            keys = {u: (k["FGPU_ACCESS_KEY"], k["FGPU_SECRET_KEY"]) for u, k in up.keys.items()}
            url = f"http://127.0.0.1:{port}"
            yield Seed(url, keys["researcher"], keys["other"], image, tmp, tmp)
    finally:
        remove_image(image)


def chromium(profile: Path) -> WebDriver:
    """The scenario's browser: headless Chromium, its profile under ``profile``."""
    from tests.support.browser import chrome

    return chrome(profile, WIDTH, HEIGHT)


def _check(tmp: Path, steps: Steps, shots: Path | None) -> None:
    with seed_stack(tmp, steps) as seed:
        if shots is not None:
            shots.mkdir(parents=True, exist_ok=True)
            seed.shots = shots
        run_seed(seed, chromium, steps)


def main(argv: list[str] | None = None) -> int:
    """``scripts/web-check``: one JSON line, exit 1 on failure."""
    parser = argparse.ArgumentParser(
        prog="scripts/web-check",
        description="The web UI's seed check against a fresh `fgpu up` (its own FGPU_HOME "
        "in /tmp, one mock 16 GiB GPU worth 2 fGPU, Docker, headless Chromium): sign in, "
        "launch 0.5 fGPU with the slider, see it RUNNING with gpu0 0.5, type nvidia-smi in "
        "its terminal and read the slice's total, a second user sees none of it, "
        "terminate. Prints one JSON line: pass, the total read, each step's seconds.",
    )
    parser.add_argument("--shots", type=Path, help="keep the screenshots in this folder")
    args = parser.parse_args(argv)
    os.environ.setdefault("SE_OFFLINE", "true")  # selenium must never fetch a driver
    steps = Steps()
    error = None
    with tempfile.TemporaryDirectory(prefix="fgpu-web-check.") as tmp:
        try:
            _check(Path(tmp), steps, args.shots)
        except Exception as e:  # the report says what failed; the exit code that it did
            error = f"{type(e).__name__}: {e}"
            traceback.print_exc(file=sys.stderr)
    line = {"pass": error is None, "slice_total": steps.total, "session": steps.session}
    line |= {"seconds": steps.seconds, **({"error": error} if error else {})}
    print(json.dumps(line))
    return 0 if error is None else 1


if __name__ == "__main__":
    sys.exit(main())
