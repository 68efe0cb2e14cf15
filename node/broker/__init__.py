"""A broker process: `BrokerNode` (node.py) builds the storage, replication, groups and listeners;
`apis` is the one handler table both listeners serve; `lifecycle` registers and heartbeats with
the controller and forwards admin requests to it; `config` reads the broker's properties."""
