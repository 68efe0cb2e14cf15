"""Broker and controller semantics as single-owner asyncio actors (DESIGN.md), grouped by role:

    replication/  partition actors, the ReplicaManager, delayed produce and fetch, replica
                  fetchers, AlterPartition proposals, the data path (Kafka's ReplicaManager,
                  Partition, ReplicaFetcherThread)
    controller/   the controller actor, its metadata model and the channel to brokers
    group/        the consumer-group coordinator on __consumer_offsets
    transactions/ the transaction coordinator on __transaction_state (KIP-98)
    acl/          ACL bindings and the authorizer's rules (Kafka's StandardAuthorizer), pure:
                  the controller stores ACLs, the brokers enforce them

`views` (published partition state), `metadata_cache` (a broker's view of the cluster), and the
coordinators' `partition_router` and `partition_log` are shared by the areas. May import `client`,
`runtime` and `wire`; the areas do not import each other (import-linter's "actor areas" contract).
"""
