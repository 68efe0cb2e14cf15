"""ketch's own Python client: connections, cluster metadata, the producer with its accumulator and
partitioner, and the consumer. Like Kafka's clients module, it is also what brokers use to talk to
each other and to the controller (fetchers, the controller channel).

May import `runtime` and `wire`.
"""
