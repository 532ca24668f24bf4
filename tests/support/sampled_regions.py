"""SliceRegions for the agent's meter and pacer tests: each session's devices are what a
test says, and the scales the pacer sets are kept; no region is made or removed."""

from collections.abc import Sequence

from services.ports import DeviceUsageSample, OomRefusal

__all__ = ["SampledRegions"]


class SampledRegions:
    def __init__(self, devices: dict[str, list[DeviceUsageSample]] | None = None) -> None:
        self.devices = devices or {}
        self.paced: dict[tuple[str, int], float] = {}

    def create(self, key: str, mem_limits: Sequence[int], sm_shares_ppm: Sequence[int]) -> str:
        raise AssertionError("not made here")

    def set_pace(self, key: str, index: int, scale: float) -> None:
        self.paced[(key, index)] = round(scale, 3)

    def sample(self, key: str) -> list[DeviceUsageSample]:
        return self.devices.get(key, [])

    def drain_ooms(self, key: str) -> list[OomRefusal]:
        return []

    def reclaim(self, key: str) -> int:
        return 0

    def remove(self, key: str) -> None:
        pass
