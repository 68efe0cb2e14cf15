"""Benchmarks only: each prints its figures (medians, percentiles, ratios against a baseline
measured in the same run). `latency` is also `ketch bench latency`, so the CLI sits above bench."""
