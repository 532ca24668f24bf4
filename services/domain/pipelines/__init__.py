"""Pipelines: the document people write, its graph's rules, the fold of runs and what
the pipeline actor decides from it. Pure."""
