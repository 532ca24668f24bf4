"""Image references in a registry of the tests' own (registry.test), in two versions."""

REGISTRY = "registry.test:5000"


TOOL_1 = f"{REGISTRY}/fgpu/tool:1"


TOOL_2 = f"{REGISTRY}/fgpu/tool:2"
