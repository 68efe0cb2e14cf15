"""Log compaction shared by the brokers' live cleaner and the offline Spark job.

Kafka's LogCleaner, in modules by role:

* `source`, `txn`, `write` — what a compaction pass reads and writes, the same code for the
  offline job (`offline.compact`, per partition in a Spark task) and for the live cleaner;
* `offset_map` — the live cleaner's key -> latest offset map, bounded by
  ``log.cleaner.dedupe.buffer.size``;
* `config` — the broker's ``log.cleaner.*`` settings;
* `manager` — Kafka's LogCleanerManager: which compacted log to clean next (dirty ratio,
  compaction lags, the cleanable range) and the ``cleaner-offset-checkpoint``;
* `task` — one cleaning: its plan (taken on the event loop) and its blocking pass (a thread);
* `swap` — the partition owner's side: checks and the ``.cleaned`` -> ``.swap`` swap;
* `cleaner` — the loop that ties them together, with its metrics.
"""
