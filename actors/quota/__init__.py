"""Client quotas with the semantics of Kafka's ClientQuotaManager (KIP-13, KIP-55, KIP-219).

    entities.py   quota entities (user, client-id, both; `<default>` names), the quota keys
                  ketch enforces, and the checks of an AlterClientQuotas entry (Kafka's rules)
    rate.py       `Rate`: a byte rate over `quota.window.num` samples of
                  `quota.window.size.seconds` (Kafka's SampledStat / Rate), on given times
    manager.py    `ClientQuotaManager`: which entity's quota applies to a (user, client-id)
                  (Kafka's eight-level order), the shared rate it is measured by, and the
                  throttle time a recorded value costs

Pure (no I/O, no asyncio; time is passed in or read from an injected clock), so the controller
(which validates and stores quotas in its metadata log) and the brokers (which enforce them)
import the same rules.
"""
