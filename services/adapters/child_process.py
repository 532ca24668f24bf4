"""Children of ours that must not outlive us: the kernel stops them when we end, however
we end (a SIGKILL included), so a crashed ``fgpu up`` leaves no server on its store and no
proxy on its port."""

import signal
import sys
from collections.abc import Callable

__all__ = ["die_with_parent"]


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` for ``subprocess.Popen`` (None where the kernel cannot: not Linux):
    the child gets SIGTERM when the thread that started it ends. Start the child from a
    thread that lives as long as the child should (the main thread, or the event loop's),
    never from a worker thread of a pool, whose end would stop it."""
    return _pdeathsig_term if sys.platform == "linux" else None


def _pdeathsig_term() -> None:
    """In the child before it runs its program: SIGTERM when the parent thread ends."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
