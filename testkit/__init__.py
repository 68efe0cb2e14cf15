"""The cluster test kit (Kafka's KafkaClusterTestKit): whole ketch clusters for tests,
benchmarks and users' own tests, written once.

    cluster      an in-process cluster: N brokers and the controller on one event loop, simulated
                 (a ManualClock, a seeded in-memory network or TCP) or on the wall clock over TCP
    processes    a cluster of real processes on 127.0.0.1, in `ketch up`'s layout and with its
                 command lines (node/layout.py), killed and restarted by PID
    probes       bounded polls and the requests a harness asks a running cluster through its
                 brokers (DescribeCluster, Metadata, CreateTopics)

Sits between `bench` and `node`: may import `node` (its composition roots and the cluster
layout) and everything below it (actors, client, runtime, wire); never `bench`, `cli` or
`tests`, which import it.
"""
