"""Test doubles of the ports, shipped beside the code they stand in for (as ``trio.testing``).
The in-memory log and the virtual clock are product code (``services.adapters.memory_log``,
``services.adapters.virtual_clock``: the simulator runs on them).

Each passes the same contract tests as the real adapter (``tests/support/log_contract.py``,
``tests/support/bus_contract.py``, ``tests/support/snapshot_contract.py``,
``tests/support/proxy_contract.py``,
``tests/adapters/test_gpu_watch_adapters.py``, ``tests/adapters/test_mps_daemon.py``; the
Kicker's is in ``tests/adapters/test_gatekeeper.py``).
"""

from services.testing.gpu_watch import FakeContainers, FakeGpuWatch
from services.testing.memory_bus import MemoryBus
from services.testing.memory_output import MemoryOutput
from services.testing.memory_proxy import MemoryProxy, memory_proxy
from services.testing.memory_servers import MemoryServers
from services.testing.memory_snapshots import MemorySnapshots
from services.testing.mps import FakeMps

__all__ = [
    "FakeContainers",
    "FakeGpuWatch",
    "FakeMps",
    "MemoryBus",
    "MemoryOutput",
    "MemoryProxy",
    "MemoryServers",
    "MemorySnapshots",
    "memory_proxy",
]
