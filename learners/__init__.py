"""Learners: losses and update steps (V-trace/IMPALA, ...)."""
