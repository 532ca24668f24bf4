"""The domain: pure rules and the pure fold of the log; no I/O, no clock, no ports.

Four subpackages over the modules at the top, each importing only those below it:

- the top (``records``, ``resources``, ``status``, ``durations``, ``refusal``, ...): what
  serves all, leaves that import nothing else of the domain;
- ``tenancy``: the tenancy's records and the rules of administrators' commands and
  virtual folders, pure functions of the tenancy;
- ``fold``: the cluster as a fold of the log (``fold.state.evolve``), the aggregate it
  keeps (``fold.cluster.ClusterState``) with its indexes, and its encoding;
- ``scheduling``: admission and placement decisions over the fold's state;
- ``access``: who may reach or read what (bus permissions, keys, the read API's scopes,
  sessions' channels, the domains of records).

``scheduling`` and ``access`` import neither each other. tests/test_layers.py holds the
order and finds any import cycle, ``TYPE_CHECKING`` imports included.
"""
