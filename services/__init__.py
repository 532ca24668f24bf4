"""fgpu's services: the domain, ports, actors, adapters and entry points."""

__version__ = "0.1.0"  # the one place it is written: pyproject.toml reads it
