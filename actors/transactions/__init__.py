"""Transactions (KIP-98): the transaction coordinator on `__transaction_state`. `state` is one
transactional id's metadata and its state machine (Kafka's TransactionMetadata); `rules` are the
coordinator's request checks (InitProducerId, AddPartitionsToTxn, EndTxn, markers done, timeouts,
expiry) as pure functions of it. The record format is wire/transaction_log.py.
"""
