"""Formats only, sans-IO: what crosses a socket or lands on disk, and nothing that does I/O.

Frames and the msgpack envelope, typed native messages (`messages/`), error codes, RecordBatch v2
and its codecs, Kafka's wire protocol (`kafka/`), `__consumer_offsets` and `__transaction_state`
records (`group_records`, `transaction_log`), the controller's metadata records, topic and
partition identity (`topic`), and one error answer per request type. Imports nothing of ketch's
other packages, and no event loop, socket or file API (import-linter's "sans-IO" contract in
pyproject.toml).
"""
