"""Simulations that drive the real actors: trace replays (``fgpu sim replay``)."""
