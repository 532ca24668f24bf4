"""Decisions over the fold's state: admission (``quota``, ``images``) and placement
(``allocator``, ``agent_groups``, ``fragmentation``, ``placement``, ``queue_order``,
``schedule_round``)."""
