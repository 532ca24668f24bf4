"""A session view of a container with the shim mounted, for a test to run on a real engine."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from events import DevicePlacement, Slots
from services.domain.records import SessionView


def shim_session(image: str, script: str, *, fgpu: int = 100) -> SessionView:
    """A running session of ``image`` on device 0 (``fgpu`` quanta of it), running
    ``script`` with sh."""
    return SessionView(
        session_id=f"nvml{uuid.uuid4().hex[:8]}",
        owner="alice",
        image=image,
        command=("sh", "-c", script),
        slots=Slots(cpu=500, mem=256 << 20, fgpu=fgpu),
        priority=0,
        name=None,
        request_id="r",
        correlation_id="c",
        arrival_seq=1,
        requested_at=datetime(2026, 1, 1, tzinfo=UTC),
        devices=(DevicePlacement(gpu_index=0, fgpu=fgpu),),
    )
