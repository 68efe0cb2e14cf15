"""Networking mechanisms: transports (TCP with TLS, and a seeded in-memory network for tests and
simulation), the request server, its dialects (native msgpack with the cluster-credential
exchange, and Kafka's wire protocol), and reconnect backoff."""
