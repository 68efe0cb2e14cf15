"""Access control lists with the semantics of Kafka's StandardAuthorizer (KIP-801).

    bindings.py    resource patterns, access control entries, bindings and binding filters,
                   with Kafka's resource, pattern, operation and permission types and ids
    authorizer.py  `Authorizer`: allow or deny one principal, host and operation on a resource,
                   from the ACL set, super.users and allow.everyone.if.no.acl.found

Pure (no I/O, no asyncio), so the controller (which stores the ACLs in its metadata log and
matches DeleteAcls filters) and the brokers (which enforce them) import the same rules.
"""
