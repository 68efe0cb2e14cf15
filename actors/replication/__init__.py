"""Replication: partition actors (leader and follower state, ISR and high watermark), the
ReplicaManager that hosts them, the produce and fetch purgatories, replica fetchers, the
AlterPartition manager, and the request path (Produce, Fetch, ListOffsets, OffsetForLeaderEpoch).
The functional spec is the seeds (Kafka's ReplicaManager and Partition)."""
