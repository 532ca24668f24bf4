"""MpsControl through NVIDIA's ``nvidia-cuda-mps-control``: one control daemon per GPU.

Each daemon runs with ``CUDA_VISIBLE_DEVICES`` its GPU's UUID (so its clients' device 0 is
that GPU) and its own ``CUDA_MPS_PIPE_DIRECTORY`` and ``CUDA_MPS_LOG_DIRECTORY``
(``<root>/<index>/pipe`` and ``.../log``), started with ``-d`` and stopped by writing
``quit`` to the program with the same environment. Errors: ``MpsUnavailable`` for any
start that fails (the program's own words in the message); nothing raises at stop.
"""

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

import structlog

from services.ports.mps import MpsUnavailable

__all__ = ["MpsDaemons", "pipe_dir"]

log = structlog.get_logger()

PROGRAM = "nvidia-cuda-mps-control"
_PID_FILE = "nvidia-cuda-mps-control.pid"  # which the daemon writes in its pipe directory
# A Unix socket's path holds at most 107 bytes; the daemon's longest name in its pipe
# directory is "/control_privileged" (19).
_MAX_PIPE_DIR = 107 - 19


def pipe_dir(root: str, index: int) -> str:
    """The pipe directory of the daemon of the GPU of host ``index``, under ``root``."""
    return str(Path(root, str(index), "pipe"))


class MpsDaemons:
    """The daemons of ``gpus`` (UUID -> pipe directory; the log directory is beside it),
    run with ``program`` (looked up on PATH if not a path)."""

    def __init__(
        self, gpus: Mapping[str, str], program: str = PROGRAM, quit_timeout_s: float = 10.0
    ) -> None:
        self._gpus = dict(gpus)
        self._program = program
        self._quit_timeout_s = quit_timeout_s
        self._exe: str | None = None

    @property
    def pipe_dirs(self) -> dict[str, str]:
        return dict(self._gpus)

    def _env(self, uuid: str) -> dict[str, str]:
        pipe = self._gpus[uuid]
        return {
            **os.environ,
            "CUDA_VISIBLE_DEVICES": uuid,
            "CUDA_MPS_PIPE_DIRECTORY": pipe,
            "CUDA_MPS_LOG_DIRECTORY": str(Path(pipe).parent / "log"),
        }

    def start(self) -> None:
        self._exe = shutil.which(self._program)
        if self._exe is None:
            raise _unavailable(
                f"{self._program} not found (on PATH): it comes with the NVIDIA driver's "
                "compute utilities; install them, or run the agent without --mps"
            )
        started: list[str] = []
        try:
            for uuid in self._gpus:
                if self._start_one(uuid):
                    started.append(uuid)
        except MpsUnavailable:
            for uuid in started:
                self._quit(uuid)
            raise

    def _start_one(self, uuid: str) -> bool:
        """Whether it started the daemon of ``uuid`` (False: one ran there already)."""
        pipe = self._gpus[uuid]
        if len(os.fsencode(pipe)) > _MAX_PIPE_DIR:
            raise _unavailable(
                f"MPS of GPU {uuid}: its pipe directory {pipe} is too long for a socket's "
                f"path (at most {_MAX_PIPE_DIR} bytes): give FGPU_HOME a shorter path"
            )
        env = self._env(uuid)
        try:
            Path(pipe).mkdir(parents=True, exist_ok=True)
            Path(env["CUDA_MPS_LOG_DIRECTORY"]).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise _unavailable(f"MPS of GPU {uuid}: cannot make {pipe}: {e}") from e
        if _running(Path(pipe)):
            log.info("mps.adopted", gpu=uuid, pipe_dir=pipe)
            return False
        assert self._exe is not None
        try:
            done = subprocess.run(
                [self._exe, "-d"], env=env, capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise _unavailable(f"MPS of GPU {uuid}: {self._exe} -d: {e}") from e
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip() or f"exit status {done.returncode}"
            raise _unavailable(
                f"MPS of GPU {uuid}: {self._exe} -d failed: {said} "
                f"(its log: {env['CUDA_MPS_LOG_DIRECTORY']})"
            )
        log.info("mps.started", gpu=uuid, pipe_dir=pipe)
        return True

    def stop(self) -> None:
        if self._exe is None:
            return  # never started
        for uuid in self._gpus:
            self._quit(uuid)

    def _quit(self, uuid: str) -> None:
        assert self._exe is not None
        try:
            done = subprocess.run(
                [self._exe],
                input="quit\n",
                env=self._env(uuid),
                capture_output=True,
                text=True,
                timeout=self._quit_timeout_s,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            log.warning("mps.not_stopped", gpu=uuid, error=str(e))
            return
        if done.returncode != 0:
            log.warning("mps.not_stopped", gpu=uuid, error=(done.stderr or done.stdout).strip())
        else:
            log.info("mps.stopped", gpu=uuid)


def _running(pipe: Path) -> bool:
    """Whether the pid file in ``pipe`` names a live process."""
    try:
        pid = int((pipe / _PID_FILE).read_text().split()[0])
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return False
    return True


def _unavailable(message: str) -> MpsUnavailable:
    log.error("mps.unavailable", error=message)
    return MpsUnavailable(message)
