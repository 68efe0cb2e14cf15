"""The `ketch` command: one module per command group (topic, group, produce/consume in `data`,
cluster status, cluster admin), `main` (the entry point and the pass-through to the node mains),
and `up/` (the local-cluster supervisor). Sits on top: may import every other package."""
