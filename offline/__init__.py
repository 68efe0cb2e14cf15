"""Spark jobs that read the logs offline: a data source for Kafka's log format, log verification
and compaction. Sits beside `actors`: may import `runtime` (the storage engine) and `wire`."""
