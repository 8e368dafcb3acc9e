"""Architectures built outside archzoo from its components; docs/tutorial.md walks through
replay_impala.py. Run one from the repository root: ``archzoo run examples.replay_impala:ARCH``."""
