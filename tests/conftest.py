"""Shared test configuration.

Hypothesis runs derandomized (a fixed seed derived from each test) with no example database, so
every run of `make test` explores the same examples and a failure reproduces exactly; the failing
example is printed by hypothesis itself.
"""

from __future__ import annotations

from hypothesis import settings

settings.register_profile("ketch", derandomize=True, database=None, deadline=None, print_blob=True)
settings.load_profile("ketch")
