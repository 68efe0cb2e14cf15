"""Deterministic whole-cluster simulation (issue 20): the loop, faults, workload, history
and checkers."""
