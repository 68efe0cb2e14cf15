"""The composition root: builds actors and mechanisms into processes.

    broker/       a broker node (`BrokerNode`), its API table for both listeners (`apis`), its
                  lifecycle with the controller, config and process main
    controller/   a controller node and its process main
    process       what both process mains share (flags, secret file, signal-driven run loop)
    layout        a local cluster's directories, secret, cluster.json and node command lines
                  (what `ketch up` and testkit's process cluster both lay out and run)

The only package that assembles `actors`; may import `actors`, `client`, `runtime` and `wire`.
A broker node and a controller node are built apart
(import-linter's "node roles" contract).
"""
