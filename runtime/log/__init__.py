"""The storage engine: Kafka's on-disk log format, indexes, checkpoints and recovery.

Entry points: `runtime.log.manager.LogManager` (a broker's log dirs and background tasks) and
`runtime.log.log.Log` (one partition). By role:

* ``dir_loader``, ``dir_failure``, ``background`` — opening a broker's log dirs, failed dirs
  (Kafka's LogDirFailureChannel), and the manager's periodic work
* ``config`` — `LogConfig` / `LogManagerConfig` under Kafka's property names
* ``errors`` — the typed storage errors
* ``partition_dir`` — `TopicPartition` and partition directory names
* ``offsets`` — `LogOffsetMetadata`, `FetchDataInfo`, `LogAppendInfo`
* ``index_file``, ``offset_index``, ``time_index`` — ``.index`` / ``.timeindex`` files
* ``transaction_index`` — ``.txnindex`` files (a segment's aborted transactions)
* ``file_batches`` — walking the batches of a ``.log`` file
* ``segment`` — `LogSegment`, one ``.log`` with its indexes
* ``produced_batches`` — what a leader checks and stamps in produced batches before appending
* ``recovery`` — loading a partition directory (swaps, sanity checks, crash recovery)
* ``epoch_cache`` — `LeaderEpochCache` (``leader-epoch-checkpoint``)
* ``producer_state``, ``producer_snapshot``, ``producer_replay`` — idempotent producers' state per
  partition (Kafka's ProducerStateManager), its ``.snapshot`` files, and folding batches into it
* ``checkpoints`` — the checkpoint files and ``partition.metadata``, written atomically
* ``dump`` — `ketch dump-log`
* ``metadata_log``, ``metadata_log_format`` — the controller's metadata log and its files
"""
