"""Node metrics in Prometheus text format, served on `GET /metrics`.

Each node (broker or controller) owns one `NodeMetrics`: its own `CollectorRegistry`, never the
process-wide default, because tests run several nodes in one process and each must report only
its own numbers. Names follow Kafka's JMX beans as the Prometheus JMX exporter lowercases them
(`kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions` becomes
`kafka_server_replicamanager_underreplicatedpartitions`); a Kafka rate meter
(`IsrShrinksPerSec`) becomes a counter (`..._isrshrinks_total`), from which Prometheus computes
the rate. What Kafka has no bean for is named `ketch_...`.

Cost model. Only one thing happens per request: `RequestMetrics.observe`, a dict lookup, a
`bisect` over the bucket bounds and two integer additions (no lock, no label resolution, no
`prometheus_client` object touched). Everything else is computed at scrape time by collectors
that read published state: partition views, mailbox `statistics()`, purgatory counts. An ISR
change bumps a plain integer (rare). So an unscraped broker pays only the per-request observation.

By role:

* ``registry`` — `NodeMetrics` (a node's registry and its scrape), `metrics.port`, the
  collectors both kinds of node share (mailbox depths)
* ``broker`` — `BrokerMetrics`: request latency, ISR changes, replica counts, purgatories
* ``controller`` — `ControllerMetrics`: the controller's gauges, from a snapshot per scrape
* ``endpoint`` — `MetricsHttpServer`, the HTTP endpoint on the node's loop

Ownership: a `NodeMetrics` belongs to its node; every method runs on the node's loop thread.
"""
