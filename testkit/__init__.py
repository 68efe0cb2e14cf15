"""The cluster test kit (Kafka's KafkaClusterTestKit): whole ketch clusters for tests,
benchmarks and users' own tests, written once.

    cluster      an in-process cluster: N brokers and the controller on one event loop, simulated
                 (a ManualClock, a seeded in-memory network or TCP) or on the wall clock over TCP
    processes    a cluster of real processes on 127.0.0.1, in `ketch up`'s layout and with its
                 command lines (node/layout.py), killed and restarted by PID
    probes       bounded polls and the requests a harness asks a running cluster through its
                 brokers (DescribeCluster, Metadata, CreateTopics)
    sim/         the deterministic whole-cluster simulation on `cluster`: a simulated event
                 loop, seeded faults, a workload, the history and its checkers (issue 20)
    disk         disk faults (a log whose writes start failing)
    proxy        fault-injecting TCP proxies in front of a process cluster's nodes
    testing      the testing API for users: a process cluster behind the proxies, with kill,
                 restart, pause, partition, heal, controlled shutdown, waits for ISRs and leaders
    pytest_plugin  the `ketch_cluster` fixture on `testing`

Sits between `bench` and `node`: may import `node` (its composition roots and the cluster
layout) and everything below it (actors, client, runtime, wire); never `bench`, `cli` or
`tests`, which import it.
"""
