"""The Kafka wire protocol, sans-IO: request/response frames with kio's schemas (`codec`), the
conversion between kio entities and ketch's native messages (`convert`), and the table of served
APIs and versions (`apis`). The listener that uses it is runtime/net/kafka_dialect.py."""
