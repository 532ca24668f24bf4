"""The cluster as a pure fold of the log.

``state`` folds records (``evolve``), with one module per family of events (``sessions``,
``agents``, ``admin``) and the quota and allocations they hold (``holdings``); ``cluster``
is the aggregate it keeps, with the indexes over its records (``pending``,
``running_index``, ``fit_index``, ``group_shares``, ``workload``); ``state_codec`` encodes
it for snapshots; ``validation`` checks a request's content as it is folded.
"""
