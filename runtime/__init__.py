"""Mechanisms, no broker semantics: the injected clock, the actor kernel and mailboxes, the
hierarchical timing wheel, the purgatory, the storage engine (`log/`), the request server with its
protocol dialects and the transports (`net/`), configuration and the metrics registry.

May import `wire` only. Nothing here knows what a partition leader or a consumer group is.
"""
