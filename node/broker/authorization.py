"""`Authorization`: a listener's handlers wrapped with ACL checks, by KafkaApis' rules.

With an authorizer configured (authorizer.class.name, actors/acl/authorizer.py), `wrap` puts a
guard in front of each handler of a listener's table (the Kafka listener's, and the native
listener's through node/broker/native_security.py); node/broker/apis.py's handlers stay
as they are. A guard asks the authorizer about the request's principal (`RequestContext.
principal`) and host (the peer's IP address), then serves what is allowed and answers what is
not with Kafka's error, in the place Kafka puts it:

    Produce                WRITE on each topic, else TOPIC_AUTHORIZATION_FAILED on its
                           partitions; with a transactional id, WRITE on it first, else
                           TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition
    Fetch                  READ on each topic (TOPIC_AUTHORIZATION_FAILED per partition)
    ListOffsets, OffsetForLeaderEpoch, DescribeProducers   DESCRIBE / DESCRIBE / READ per topic
    Metadata               topics without DESCRIBE are left out of an all-topics answer; a named
                           one is answered TOPIC_AUTHORIZATION_FAILED. Auto-creating a named topic
                           that does not exist needs CREATE on the cluster or on the topic, else
                           TOPIC_AUTHORIZATION_FAILED
    InitProducerId         transactional: WRITE on the transactional id (TRANSACTIONAL_ID_
                           AUTHORIZATION_FAILED); idempotent: IDEMPOTENT_WRITE on the cluster or
                           WRITE on some topic (KIP-679), else CLUSTER_AUTHORIZATION_FAILED
    FindCoordinator        DESCRIBE on each group / transactional id, per key
    JoinGroup, SyncGroup, Heartbeat, LeaveGroup   READ on the group (GROUP_AUTHORIZATION_FAILED)
    OffsetCommit           READ on the group (every partition GROUP_AUTHORIZATION_FAILED), then
                           READ on each topic (TOPIC_AUTHORIZATION_FAILED per partition)
    OffsetFetch            DESCRIBE on the group, DESCRIBE on each topic named; an all-topics
                           answer leaves out the topics without it (Kafka's rules)
    DescribeGroups / ListGroups / DeleteGroups / OffsetDelete   DESCRIBE per group / only the
                           groups with DESCRIBE (all with DESCRIBE on the cluster) / DELETE per
                           group / DELETE on the group
    CreateTopics           CREATE on the cluster, else on each topic; DeleteTopics DELETE and
                           CreatePartitions ALTER per topic (TOPIC_AUTHORIZATION_FAILED each)
    DescribeConfigs, IncrementalAlterConfigs   DESCRIBE_CONFIGS / ALTER_CONFIGS on each topic
                           (TOPIC_AUTHORIZATION_FAILED) or on the cluster for a broker resource
                           (CLUSTER_AUTHORIZATION_FAILED)
    AddPartitionsToTxn     WRITE on the transactional id, then WRITE on each topic (refused
                           topics TOPIC_AUTHORIZATION_FAILED, the transaction's others
                           OPERATION_NOT_ATTEMPTED, nothing added)
    AddOffsetsToTxn, EndTxn, TxnOffsetCommit   WRITE on the transactional id; AddOffsetsToTxn and
                           TxnOffsetCommit also READ on the group, TxnOffsetCommit READ per topic
    DescribeTransactions / ListTransactions   DESCRIBE per transactional id / only those with it
    DescribeCluster        DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED)
    Describe/AlterClientQuotas   DESCRIBE_CONFIGS / ALTER_CONFIGS on the cluster
    Describe/AlterUserScramCredentials   DESCRIBE / ALTER on the cluster
    ConsumerGroupHeartbeat READ on the group; ConsumerGroupDescribe DESCRIBE on every group asked
                           for (a group refused refuses the request: GROUP_AUTHORIZATION_FAILED)

A request partly refused is split: the handler serves the allowed part, and the refused part's
answer (`wire.error_responses.error_response` of it, or built here) is merged into the handler's.
A request wholly refused never reaches the handler. The ACL APIs check ALTER / DESCRIBE on the
cluster themselves (node/broker/acls.py). A connection that proved the cluster credential is a
super user (brokers, the controller, `ketch` admin commands run with the cluster secret).

Without an authorizer `wrap` returns the table unchanged (no cost per request).

One role, the guards, in one module of about 600 lines, so every API's rule reads beside
the others, as KafkaApis keeps them.

Ownership: stateless apart from references to the authorizer and the broker's metadata; the
guards run on the event loop like the handlers they wrap.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from actors.acl.authorizer import Authorizer
from actors.acl.bindings import CLUSTER_NAME, AclOperation, ResourceType
from runtime.net.dialect import Handler, RequestContext
from wire.error_responses import error_response
from wire.errors import ErrorCode
from wire.messages import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopicResult,
    ApiKey,
    Coordinator,
    DescribedGroup,
    DescribedTransaction,
    MetadataResponseTopic,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
    Request,
    Response,
)
from wire.messages.admin import RESOURCE_TOPIC

Op = AclOperation
RT = ResourceType
E = ErrorCode
Guard = Callable[[Handler], Handler]
# FindCoordinator's key types.
_GROUP_KEY: Final = 0
_TRANSACTION_KEY: Final = 1


def peer_host(peer: str) -> str:
    """The IP address of a `host:port` peer (`[v6]:port` too): what an ACL's host names."""
    host = peer.rsplit(":", 1)[0]
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


class Authorization:
    """The guards of the module docstring around a handler table."""

    def __init__(self, authorizer: Authorizer, *, has_topic: Callable[[str], bool]) -> None:
        self.authorizer = authorizer
        self._has_topic = has_topic

    # -- decisions --------------------------------------------------------------------------------

    def allowed(self, ctx: RequestContext, op: AclOperation, kind: ResourceType, name: str) -> bool:
        if ctx.cluster_member or not self.authorizer.enabled:
            return True
        return self.authorizer.authorize(ctx.principal, peer_host(ctx.peer), op, kind, name)

    def allowed_any(self, ctx: RequestContext, op: AclOperation, kind: ResourceType) -> bool:
        if ctx.cluster_member or not self.authorizer.enabled:
            return True
        return self.authorizer.authorize_any(ctx.principal, peer_host(ctx.peer), op, kind)

    def on_cluster(self, ctx: RequestContext, op: AclOperation) -> bool:
        return self.allowed(ctx, op, RT.CLUSTER, CLUSTER_NAME)

    # -- the table --------------------------------------------------------------------------------

    def wrap(self, handlers: Mapping[int, Handler]) -> dict[int, Handler]:
        if not self.authorizer.enabled:
            return dict(handlers)
        guards = self._guards()
        return {key: guards[key](h) if key in guards else h for key, h in handlers.items()}

    def _guards(self) -> dict[int, Guard]:
        return {
            ApiKey.PRODUCE: self._produce,
            ApiKey.FETCH: self._split("topics", "topic", "responses", self._topic(Op.READ)),
            ApiKey.LIST_OFFSETS: self._split("topics", "name", "topics", self._topic(Op.DESCRIBE)),
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self._split(
                "topics", "topic", "topics", self._topic(Op.DESCRIBE)
            ),
            ApiKey.DESCRIBE_PRODUCERS: self._split(
                "topics", "name", "topics", self._topic(Op.READ)
            ),
            ApiKey.METADATA: self._metadata,
            ApiKey.INIT_PRODUCER_ID: self._init_producer_id,
            ApiKey.FIND_COORDINATOR: self._find_coordinator,
            ApiKey.JOIN_GROUP: self._whole(self._group(Op.READ)),
            ApiKey.SYNC_GROUP: self._whole(self._group(Op.READ)),
            ApiKey.HEARTBEAT: self._whole(self._group(Op.READ)),
            ApiKey.LEAVE_GROUP: self._whole(self._group(Op.READ)),
            ApiKey.OFFSET_DELETE: self._whole(self._group(Op.DELETE)),
            ApiKey.OFFSET_COMMIT: self._offset_commit,
            ApiKey.OFFSET_FETCH: self._offset_fetch,
            ApiKey.DESCRIBE_GROUPS: self._describe_groups,
            ApiKey.LIST_GROUPS: self._list_groups,
            ApiKey.DELETE_GROUPS: self._split(
                "groups_names",
                None,
                "results",
                lambda ctx, g: (
                    None
                    if self.allowed(ctx, Op.DELETE, RT.GROUP, g)
                    else E.GROUP_AUTHORIZATION_FAILED
                ),
            ),
            ApiKey.CREATE_TOPICS: self._create_topics,
            ApiKey.DELETE_TOPICS: self._split(
                "topic_names", None, "responses", self._topic(Op.DELETE)
            ),
            ApiKey.CREATE_PARTITIONS: self._split(
                "topics", "name", "results", self._topic(Op.ALTER)
            ),
            ApiKey.DESCRIBE_CONFIGS: self._split(
                "resources", None, "results", self._config(Op.DESCRIBE_CONFIGS)
            ),
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self._split(
                "resources", None, "responses", self._config(Op.ALTER_CONFIGS)
            ),
            ApiKey.ADD_PARTITIONS_TO_TXN: self._add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: self._whole(self._transaction_and_group),
            ApiKey.END_TXN: self._whole(self._transaction),
            ApiKey.TXN_OFFSET_COMMIT: self._txn_offset_commit,
            ApiKey.DESCRIBE_TRANSACTIONS: self._describe_transactions,
            ApiKey.LIST_TRANSACTIONS: self._list_transactions,
            ApiKey.DESCRIBE_CLUSTER: self._whole(self._cluster(Op.DESCRIBE)),
            # Quotas, SCRAM credentials and KIP-848 groups: Kafka's rules for them.
            ApiKey.DESCRIBE_CLIENT_QUOTAS: self._whole(self._cluster(Op.DESCRIBE_CONFIGS)),
            ApiKey.ALTER_CLIENT_QUOTAS: self._whole(self._cluster(Op.ALTER_CONFIGS)),
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self._whole(self._cluster(Op.DESCRIBE)),
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self._whole(self._cluster(Op.ALTER)),
            ApiKey.CONSUMER_GROUP_HEARTBEAT: self._whole(self._group(Op.READ)),
            ApiKey.CONSUMER_GROUP_DESCRIBE: self._whole(self._every_group(Op.DESCRIBE)),
        }

    # -- refusal rules: (ctx, item) -> the error, or None when allowed ----------------------------

    def _topic(self, op: AclOperation) -> Callable[[RequestContext, str], ErrorCode | None]:
        def rule(ctx: RequestContext, topic: str) -> ErrorCode | None:
            return None if self.allowed(ctx, op, RT.TOPIC, topic) else E.TOPIC_AUTHORIZATION_FAILED

        return rule

    def _group(self, op: AclOperation) -> Callable[[RequestContext, Any], ErrorCode | None]:
        def rule(ctx: RequestContext, request: Any) -> ErrorCode | None:
            allowed = self.allowed(ctx, op, RT.GROUP, request.group_id)
            return None if allowed else E.GROUP_AUTHORIZATION_FAILED

        return rule

    def _cluster(self, op: AclOperation) -> Callable[[RequestContext, Any], ErrorCode | None]:
        def rule(ctx: RequestContext, request: Any) -> ErrorCode | None:
            return None if self.on_cluster(ctx, op) else E.CLUSTER_AUTHORIZATION_FAILED

        return rule

    def _every_group(self, op: AclOperation) -> Callable[[RequestContext, Any], ErrorCode | None]:
        def rule(ctx: RequestContext, request: Any) -> ErrorCode | None:
            allowed = all(self.allowed(ctx, op, RT.GROUP, g) for g in request.group_ids)
            return None if allowed else E.GROUP_AUTHORIZATION_FAILED

        return rule

    def _transaction(self, ctx: RequestContext, request: Any) -> ErrorCode | None:
        allowed = self.allowed(ctx, Op.WRITE, RT.TRANSACTIONAL_ID, request.transactional_id)
        return None if allowed else E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    def _transaction_and_group(self, ctx: RequestContext, request: Any) -> ErrorCode | None:
        return self._transaction(ctx, request) or self._group(Op.READ)(ctx, request)

    def _config(self, op: AclOperation) -> Callable[[RequestContext, Any], ErrorCode | None]:
        def rule(ctx: RequestContext, resource: Any) -> ErrorCode | None:
            if resource.resource_type == RESOURCE_TOPIC:
                return self._topic(op)(ctx, resource.resource_name)
            return None if self.on_cluster(ctx, op) else E.CLUSTER_AUTHORIZATION_FAILED

        return rule

    # -- guard shapes -----------------------------------------------------------------------------

    def _whole(self, rule: Callable[[RequestContext, Any], ErrorCode | None]) -> Guard:
        """The whole request allowed or answered with the error."""

        def guard(handler: Handler) -> Handler:
            async def handle(request: Request, ctx: RequestContext) -> Response | None:
                refused = rule(ctx, request)
                if refused is None:
                    answer: Response | None = await handler(request, ctx)
                    return answer
                return error_response(request, refused)

            return handle

        return guard

    def _split(
        self,
        items: str,
        name: str | None,
        answers: str,
        rule: Callable[[RequestContext, Any], ErrorCode | None],
    ) -> Guard:
        """Each item of the request's list field `items` (named by its field `name`, or itself)
        allowed or refused by `rule`; the refused ones answered by `error_response`, merged into
        the answer's list field `answers`."""

        def guard(handler: Handler) -> Handler:
            async def handle(request: Request, ctx: RequestContext) -> Response | None:
                allowed, refused = _divide(
                    getattr(request, items),
                    lambda item: rule(ctx, item if name is None else getattr(item, name)),
                )
                if not refused:
                    answer: Response | None = await handler(request, ctx)
                    return answer
                return await _merge(handler, request, ctx, items, answers, allowed, refused)

            return handle

        return guard

    # -- the APIs with more to them ---------------------------------------------------------------

    def _produce(self, handler: Handler) -> Handler:
        topics = self._split("topic_data", "name", "responses", self._topic(Op.WRITE))(handler)

        async def handle(request: Any, ctx: RequestContext) -> Response | None:
            if request.transactional_id is not None and self._transaction(ctx, request):
                refused = error_response(request, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                return None if request.acks == 0 else refused
            answer: Response | None = await topics(request, ctx)
            return None if request.acks == 0 else answer

        return handle

    def _metadata(self, handler: Handler) -> Handler:
        async def handle(request: Any, ctx: RequestContext) -> Response:
            if request.topics is None:
                answer: Any = await handler(request, ctx)
                visible = [
                    t for t in answer.topics if self.allowed(ctx, Op.DESCRIBE, RT.TOPIC, t.name)
                ]
                return _replaced(answer, topics=visible)
            create_all = self.on_cluster(ctx, Op.CREATE)
            allowed, refused = _divide(
                request.topics, lambda t: self._metadata_refusal(ctx, request, t.name, create_all)
            )
            answer = await handler(dataclasses.replace(request, topics=allowed), ctx)
            denied = [MetadataResponseTopic(error_code=code, name=t.name) for t, code in refused]
            return _replaced(answer, topics=[*answer.topics, *denied])

        return handle

    def _metadata_refusal(
        self, ctx: RequestContext, request: Any, topic: str | None, create_all: bool
    ) -> ErrorCode | None:
        if topic is None:  # named by id only: the handler answers it
            return None
        if not self.allowed(ctx, Op.DESCRIBE, RT.TOPIC, topic):
            return E.TOPIC_AUTHORIZATION_FAILED
        creating = request.allow_auto_topic_creation and not self._has_topic(topic)
        if creating and not create_all and not self.allowed(ctx, Op.CREATE, RT.TOPIC, topic):
            return E.TOPIC_AUTHORIZATION_FAILED
        return None

    def _init_producer_id(self, handler: Handler) -> Handler:
        async def handle(request: Any, ctx: RequestContext) -> Response | None:
            if request.transactional_id is not None:
                refused = self._transaction(ctx, request)
            elif self.on_cluster(ctx, Op.IDEMPOTENT_WRITE) or self.allowed_any(
                ctx, Op.WRITE, RT.TOPIC
            ):
                refused = None
            else:
                refused = E.CLUSTER_AUTHORIZATION_FAILED
            if refused is not None:
                return error_response(request, refused)
            answer: Response | None = await handler(request, ctx)
            return answer

        return handle

    def _find_coordinator(self, handler: Handler) -> Handler:
        async def handle(request: Any, ctx: RequestContext) -> Response | None:
            if request.key_type == _TRANSACTION_KEY:
                kind, code = RT.TRANSACTIONAL_ID, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            else:
                kind, code = RT.GROUP, E.GROUP_AUTHORIZATION_FAILED
            allowed, refused = _divide(
                request.coordinator_keys,
                lambda key: None if self.allowed(ctx, Op.DESCRIBE, kind, key) else code,
            )
            denied = [Coordinator(key=key, error_code=c) for key, c in refused]
            return await _served_apart(
                handler, request, ctx, "coordinator_keys", "coordinators", allowed, denied
            )

        return handle

    def _offset_commit(self, handler: Handler) -> Handler:
        async def handle(request: Any, ctx: RequestContext) -> Response:
            group_refused = self._group(Op.READ)(ctx, request)
            allowed, refused = _divide(
                request.topics, lambda t: group_refused or self._topic(Op.READ)(ctx, t.name)
            )
            denied = [
                OffsetCommitResponseTopic(
                    name=topic.name,
                    partitions=[
                        OffsetCommitResponsePartition(
                            partition_index=p.partition_index, error_code=c
                        )
                        for p in topic.partitions
                    ],
                )
                for topic, c in refused
            ]
            if refused and not allowed:
                return OffsetCommitResponse(topics=denied)
            answer: Any = await handler(dataclasses.replace(request, topics=allowed), ctx)
            return _replaced(answer, topics=[*answer.topics, *denied])

        return handle

    def _offset_fetch(self, handler: Handler) -> Handler:
        async def handle(request: Any, ctx: RequestContext) -> Response:
            refused_group = self._group(Op.DESCRIBE)(ctx, request)
            if refused_group is not None:
                return error_response(request, refused_group)
            describe = self._topic(Op.DESCRIBE)
            if request.topics is None:
                answer: Any = await handler(request, ctx)
                visible = [t for t in answer.topics if describe(ctx, t.name) is None]
                return _replaced(answer, topics=visible)
            allowed, refused = _divide(request.topics, lambda t: describe(ctx, t.name))
            answer = await handler(dataclasses.replace(request, topics=allowed), ctx)
            denied = [
                OffsetFetchResponseTopic(
                    name=topic.name,
                    partitions=[
                        OffsetFetchResponsePartition(partition_index=p, metadata="", error_code=c)
                        for p in topic.partition_indexes
                    ],
                )
                for topic, c in refused
            ]
            return _replaced(answer, topics=[*answer.topics, *denied])

        return handle

    def _describe_groups(self, handler: Handler) -> Handler:
        async def handle(request: Any, ctx: RequestContext) -> Response | None:
            allowed, refused = _divide(
                request.groups,
                lambda g: (
                    None
                    if self.allowed(ctx, Op.DESCRIBE, RT.GROUP, g)
                    else E.GROUP_AUTHORIZATION_FAILED
                ),
            )
            denied = [DescribedGroup(group_id=g, error_code=c) for g, c in refused]
            return await _served_apart(handler, request, ctx, "groups", "groups", allowed, denied)

        return handle

    def _list_groups(self, handler: Handler) -> Handler:
        async def handle(request: Any, ctx: RequestContext) -> Response:
            answer: Any = await handler(request, ctx)
            if self.on_cluster(ctx, Op.DESCRIBE):
                return _replaced(answer)  # Kafka's rule: DESCRIBE on the cluster lists them all
            visible = [
                g for g in answer.groups if self.allowed(ctx, Op.DESCRIBE, RT.GROUP, g.group_id)
            ]
            return _replaced(answer, groups=visible)

        return handle

    def _create_topics(self, handler: Handler) -> Handler:
        per_topic = self._split("topics", "name", "topics", self._topic(Op.CREATE))(handler)

        async def handle(request: Request, ctx: RequestContext) -> Response | None:
            if self.on_cluster(ctx, Op.CREATE):
                answer: Response | None = await handler(request, ctx)
                return answer
            return await per_topic(request, ctx)

        return handle

    def _add_partitions_to_txn(self, handler: Handler) -> Handler:
        async def handle(request: Any, ctx: RequestContext) -> Response | None:
            allowed, refused = _divide(
                request.transactions, lambda t: self._add_partitions_refusal(ctx, t)
            )
            denied = [self._refused_transaction(ctx, t, c) for t, c in refused]
            return await _served_apart(
                handler, request, ctx, "transactions", "results_by_transaction", allowed, denied
            )

        return handle

    def _add_partitions_refusal(self, ctx: RequestContext, transaction: Any) -> ErrorCode | None:
        refused = self._transaction(ctx, transaction)
        if refused is not None:
            return refused
        write = self._topic(Op.WRITE)
        if any(write(ctx, topic.name) for topic in transaction.topics):
            return E.TOPIC_AUTHORIZATION_FAILED
        return None

    def _refused_transaction(
        self, ctx: RequestContext, transaction: Any, code: ErrorCode
    ) -> AddPartitionsToTxnResult:
        write = self._topic(Op.WRITE)

        def partition_code(topic: str) -> ErrorCode:
            if code != E.TOPIC_AUTHORIZATION_FAILED:
                return code
            return write(ctx, topic) or E.OPERATION_NOT_ATTEMPTED

        return AddPartitionsToTxnResult(
            transactional_id=transaction.transactional_id,
            topic_results=[
                AddPartitionsToTxnTopicResult(
                    name=topic.name,
                    results_by_partition=[
                        AddPartitionsToTxnPartitionResult(
                            partition_index=p, partition_error_code=partition_code(topic.name)
                        )
                        for p in topic.partitions
                    ],
                )
                for topic in transaction.topics
            ],
        )

    def _txn_offset_commit(self, handler: Handler) -> Handler:
        topics = self._split("topics", "name", "topics", self._topic(Op.READ))(handler)

        async def handle(request: Any, ctx: RequestContext) -> Response | None:
            refused = self._transaction_and_group(ctx, request)
            if refused is not None:
                return error_response(request, refused)
            return await topics(request, ctx)

        return handle

    def _describe_transactions(self, handler: Handler) -> Handler:
        async def handle(request: Any, ctx: RequestContext) -> Response | None:
            allowed, refused = _divide(
                request.transactional_ids,
                lambda t: (
                    None
                    if self.allowed(ctx, Op.DESCRIBE, RT.TRANSACTIONAL_ID, t)
                    else E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                ),
            )
            denied = [DescribedTransaction(transactional_id=t, error_code=c) for t, c in refused]
            return await _served_apart(
                handler, request, ctx, "transactional_ids", "transaction_states", allowed, denied
            )

        return handle

    def _list_transactions(self, handler: Handler) -> Handler:
        async def handle(request: Any, ctx: RequestContext) -> Response:
            answer: Any = await handler(request, ctx)
            visible = [
                t
                for t in answer.transaction_states
                if self.allowed(ctx, Op.DESCRIBE, RT.TRANSACTIONAL_ID, t.transactional_id)
            ]
            return _replaced(answer, transaction_states=visible)

        return handle


def _replaced(answer: Any, **changes: Any) -> Response:
    """`answer` with `changes` (the guards merge lists into a handler's answer)."""
    replaced = dataclasses.replace(answer, **changes)
    assert isinstance(replaced, Response), replaced
    return replaced


def _divide(
    items: Sequence[Any], refusal: Callable[[Any], ErrorCode | None]
) -> tuple[list[Any], list[tuple[Any, ErrorCode]]]:
    """The allowed items, and the refused ones with their errors, each in request order."""
    allowed: list[Any] = []
    refused: list[tuple[Any, ErrorCode]] = []
    for item in items:
        code = refusal(item)
        if code is None:
            allowed.append(item)
        else:
            refused.append((item, code))
    return allowed, refused


async def _merge(
    handler: Handler,
    request: Request,
    ctx: RequestContext,
    items: str,
    answers: str,
    allowed: list[Any],
    refused: list[tuple[Any, ErrorCode]],
) -> Response | None:
    """The handler's answer to the allowed items, with the refused ones' error answers (one
    `error_response` per distinct error) appended to its `answers` list."""
    denied: list[Any] = []
    for code in dict.fromkeys(c for _, c in refused):
        part = dataclasses.replace(request, **{items: [i for i, c in refused if c == code]})
        denied.extend(getattr(error_response(part, code), answers))
    return await _served_apart(handler, request, ctx, items, answers, allowed, denied)


async def _served_apart(
    handler: Handler,
    request: Request,
    ctx: RequestContext,
    items: str,
    answers: str,
    allowed: list[Any],
    denied: list[Any],
) -> Response | None:
    """The handler's answer to the `allowed` items of the request's list `items`, with the
    refused items' answers `denied` after its own in the answer's list `answers`; the handler
    is not called when nothing is allowed. None when the handler answers nothing (acks=0)."""
    if not allowed:
        return _replaced(type(request).RESPONSE(), **{answers: denied})
    answer: Response | None = await handler(dataclasses.replace(request, **{items: allowed}), ctx)
    if answer is None:
        return None
    return _replaced(answer, **{answers: [*getattr(answer, answers), *denied]})
