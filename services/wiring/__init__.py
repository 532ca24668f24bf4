"""The stack's wiring: the actors on their real adapters, assembled from a plain
configuration (``services.wiring.stack``), and each part on its own
(``services.wiring.parts``), for the entry points (``fgpu up``, ``fgpu api``, ``fgpu
agent`` and the single services' commands), the tests and the benches. No entry point's
options, output or home here: they hand over what they decided."""
