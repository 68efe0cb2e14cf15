"""The Kafka listener's ACL guards (node/broker/authorization.py) and the broker's ACL APIs
(node/broker/acls.py), against recording handlers: what reaches a handler, what is answered
without it, and the errors Kafka puts where Kafka puts them."""

from __future__ import annotations

from typing import Any

from actors.acl.authorizer import STANDARD_AUTHORIZER, Authorizer, AuthorizerConfig
from actors.acl.bindings import AclBinding, AclOperation, AclPermissionType, PatternType
from actors.acl.bindings import ResourceType as RT
from node.broker.acls import BrokerAcls
from node.broker.authorization import Authorization, peer_host
from runtime.net.dialect import Handler, RequestContext
from wire.error_responses import error_response
from wire.errors import ErrorCode
from wire.messages import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
    ApiKey,
    CreatableTopic,
    CreateAclsRequest,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsFilter,
    DeleteAclsRequest,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    EndTxnRequest,
    EndTxnResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    MetadataResponseTopic,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponseTopic,
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    Request,
    Response,
    TopicProduceData,
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
    UpdateMetadataAcl,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from wire.messages.admin import RESOURCE_BROKER, RESOURCE_TOPIC

ALICE = "User:alice"
Op = AclOperation


def allow(
    op: AclOperation, kind: RT, name: str, *, principal: str = ALICE, host: str = "*"
) -> AclBinding:
    return AclBinding(kind, name, PatternType.LITERAL, principal, host, op, AclPermissionType.ALLOW)


def authorization(*acls: AclBinding, enabled: bool = True) -> Authorization:
    config = AuthorizerConfig(authorizer_class_name=STANDARD_AUTHORIZER if enabled else "")
    authorizer = Authorizer(config)
    authorizer.set_acls(acls)
    return Authorization(authorizer, has_topic=lambda topic: topic != "new")


def ctx(*, member: bool = False, principal: str = ALICE) -> RequestContext:
    return RequestContext("10.0.0.1:4000", None, 0, 0, 1, member, "kafka", principal)


class Recorder:
    """A handler answering `answer(request)` and keeping what reached it."""

    def __init__(self, answer: Any) -> None:
        self.seen: list[Request] = []
        self._answer = answer

    async def __call__(self, request: Request, context: RequestContext) -> Response | None:
        self.seen.append(request)
        result: Response | None = self._answer(request)
        return result


def guarded(auth: Authorization, key: ApiKey, handler: Recorder) -> Handler:
    return auth.wrap({key: handler})[key]


def produce_request(*topics: str, transactional_id: str | None = None) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=transactional_id,
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            TopicProduceData(name=t, partition_data=[PartitionProduceData(index=0, records=b"")])
            for t in topics
        ],
    )


def produce_ok(request: ProduceRequest) -> ProduceResponse:
    response = error_response(request, ErrorCode.NONE)
    assert isinstance(response, ProduceResponse)
    return response


def codes(response: ProduceResponse) -> dict[str, int]:
    return {t.name: t.partition_responses[0].error_code for t in response.responses}


def test_peer_host_is_the_ip_address() -> None:
    assert peer_host("10.0.0.1:4000") == "10.0.0.1"
    assert peer_host("[::1]:4000") == "::1"


async def test_without_an_authorizer_the_table_is_unchanged() -> None:
    handler = Recorder(produce_ok)
    table: dict[int, Handler] = {ApiKey.PRODUCE: handler}
    assert authorization(enabled=False).wrap(table) == table


async def test_produce_serves_the_allowed_topics_and_refuses_the_others_per_partition() -> None:
    handler = Recorder(produce_ok)
    auth = authorization(allow(Op.WRITE, RT.TOPIC, "orders"))
    answer = await guarded(auth, ApiKey.PRODUCE, handler)(produce_request("orders", "pay"), ctx())
    assert isinstance(answer, ProduceResponse)
    assert codes(answer) == {"orders": 0, "pay": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    (seen,) = handler.seen
    assert [t.name for t in seen.topic_data] == ["orders"]  # type: ignore[attr-defined]


async def test_a_wholly_refused_produce_never_reaches_the_handler() -> None:
    handler = Recorder(produce_ok)
    answer = await guarded(authorization(), ApiKey.PRODUCE, handler)(produce_request("pay"), ctx())
    assert isinstance(answer, ProduceResponse)
    assert codes(answer) == {"pay": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    assert handler.seen == []


async def test_a_transactional_produce_needs_write_on_the_transactional_id() -> None:
    handler = Recorder(produce_ok)
    auth = authorization(allow(Op.WRITE, RT.TOPIC, "orders"))
    request = produce_request("orders", transactional_id="tx")
    answer = await guarded(auth, ApiKey.PRODUCE, handler)(request, ctx())
    assert isinstance(answer, ProduceResponse)
    assert codes(answer) == {"orders": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    assert handler.seen == []


async def test_a_cluster_member_is_a_super_user() -> None:
    handler = Recorder(produce_ok)
    answer = await guarded(authorization(), ApiKey.PRODUCE, handler)(
        produce_request("pay"), ctx(member=True)
    )
    assert isinstance(answer, ProduceResponse)
    assert codes(answer) == {"pay": 0}


async def test_idempotent_init_producer_id_needs_idempotent_write_or_write_on_some_topic() -> None:
    handler = Recorder(lambda r: InitProducerIdResponse(producer_id=7, producer_epoch=0))
    request = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1000)
    refused = await guarded(authorization(), ApiKey.INIT_PRODUCER_ID, handler)(request, ctx())
    assert isinstance(refused, InitProducerIdResponse)
    assert refused.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    for grant in (
        allow(Op.WRITE, RT.TOPIC, "any-topic"),
        allow(Op.IDEMPOTENT_WRITE, RT.CLUSTER, "kafka-cluster"),
    ):
        answer = await guarded(authorization(grant), ApiKey.INIT_PRODUCER_ID, handler)(
            request, ctx()
        )
        assert isinstance(answer, InitProducerIdResponse)
        assert answer.producer_id == 7


async def test_transactional_init_producer_id_needs_write_on_the_transactional_id() -> None:
    handler = Recorder(lambda r: InitProducerIdResponse(producer_id=7, producer_epoch=0))
    request = InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=1000)
    auth = authorization(allow(Op.WRITE, RT.TOPIC, "orders"))
    answer = await guarded(auth, ApiKey.INIT_PRODUCER_ID, handler)(request, ctx())
    assert isinstance(answer, InitProducerIdResponse)
    assert answer.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def metadata_ok(request: MetadataRequest) -> MetadataResponse:
    names = ["orders", "pay"] if request.topics is None else [t.name for t in request.topics]
    return MetadataResponse(topics=[MetadataResponseTopic(name=n) for n in names if n])


async def test_metadata_hides_topics_without_describe_and_refuses_named_ones() -> None:
    handler = Recorder(metadata_ok)
    auth = authorization(allow(Op.READ, RT.TOPIC, "orders"))
    every = await guarded(auth, ApiKey.METADATA, handler)(MetadataRequest(topics=None), ctx())
    assert isinstance(every, MetadataResponse)
    assert [t.name for t in every.topics] == ["orders"]

    named = MetadataRequest(
        topics=[MetadataRequestTopic(name="orders"), MetadataRequestTopic(name="pay")]
    )
    answer = await guarded(auth, ApiKey.METADATA, handler)(named, ctx())
    assert isinstance(answer, MetadataResponse)
    assert {t.name: t.error_code for t in answer.topics} == {
        "orders": 0,
        "pay": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    }


async def test_metadata_auto_creation_needs_create_on_the_cluster_or_the_topic() -> None:
    handler = Recorder(metadata_ok)
    request = MetadataRequest(
        topics=[MetadataRequestTopic(name="new")], allow_auto_topic_creation=True
    )
    describe_only = authorization(allow(Op.DESCRIBE, RT.TOPIC, "new"))
    answer = await guarded(describe_only, ApiKey.METADATA, handler)(request, ctx())
    assert isinstance(answer, MetadataResponse)
    assert answer.topics[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    creator = authorization(
        allow(Op.DESCRIBE, RT.TOPIC, "new"), allow(Op.CREATE, RT.CLUSTER, "kafka-cluster")
    )
    answer = await guarded(creator, ApiKey.METADATA, handler)(request, ctx())
    assert isinstance(answer, MetadataResponse)
    assert answer.topics[0].error_code == ErrorCode.NONE


async def test_create_topics_with_create_on_the_cluster_or_per_topic() -> None:
    handler = Recorder(lambda r: CreateTopicsResponse())
    request = CreateTopicsRequest(
        topics=[CreatableTopic(name=n, num_partitions=1, replication_factor=1) for n in ("a", "b")]
    )
    per_topic = authorization(allow(Op.CREATE, RT.TOPIC, "a"))
    answer = await guarded(per_topic, ApiKey.CREATE_TOPICS, handler)(request, ctx())
    assert isinstance(answer, CreateTopicsResponse)
    assert [(t.name, t.error_code) for t in answer.topics] == [
        ("b", ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    ]
    assert [t.name for t in handler.seen[-1].topics] == ["a"]  # type: ignore[attr-defined]
    cluster = authorization(allow(Op.CREATE, RT.CLUSTER, "kafka-cluster"))
    await guarded(cluster, ApiKey.CREATE_TOPICS, handler)(request, ctx())
    assert handler.seen[-1] is request


async def test_group_apis_need_read_on_the_group() -> None:
    handler = Recorder(lambda r: HeartbeatResponse())
    request = HeartbeatRequest(group_id="g", generation_id=1, member_id="m")
    refused = await guarded(authorization(), ApiKey.HEARTBEAT, handler)(request, ctx())
    assert isinstance(refused, HeartbeatResponse)
    assert refused.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    auth = authorization(allow(Op.READ, RT.GROUP, "g"))
    answer = await guarded(auth, ApiKey.HEARTBEAT, handler)(request, ctx())
    assert isinstance(answer, HeartbeatResponse)
    assert answer.error_code == ErrorCode.NONE


async def test_offset_commit_refuses_the_group_then_each_topic() -> None:
    handler = Recorder(lambda r: OffsetCommitResponse())
    request = OffsetCommitRequest(
        group_id="g",
        topics=[
            OffsetCommitRequestTopic(
                name=n,
                partitions=[OffsetCommitRequestPartition(partition_index=0, committed_offset=5)],
            )
            for n in ("orders", "pay")
        ],
    )
    no_group = await guarded(
        authorization(allow(Op.READ, RT.TOPIC, "orders")), ApiKey.OFFSET_COMMIT, handler
    )(request, ctx())
    assert isinstance(no_group, OffsetCommitResponse)
    assert {t.name: t.partitions[0].error_code for t in no_group.topics} == {
        "orders": ErrorCode.GROUP_AUTHORIZATION_FAILED,
        "pay": ErrorCode.GROUP_AUTHORIZATION_FAILED,
    }
    auth = authorization(allow(Op.READ, RT.GROUP, "g"), allow(Op.READ, RT.TOPIC, "orders"))
    answer = await guarded(auth, ApiKey.OFFSET_COMMIT, handler)(request, ctx())
    assert isinstance(answer, OffsetCommitResponse)
    assert {t.name: t.partitions[0].error_code for t in answer.topics} == {
        "pay": ErrorCode.TOPIC_AUTHORIZATION_FAILED
    }
    assert [t.name for t in handler.seen[-1].topics] == ["orders"]  # type: ignore[attr-defined]


async def test_find_coordinator_refuses_keys_without_describe() -> None:
    handler = Recorder(lambda r: FindCoordinatorResponse())
    request = FindCoordinatorRequest(key_type=1, coordinator_keys=["tx"])
    answer = await guarded(authorization(), ApiKey.FIND_COORDINATOR, handler)(request, ctx())
    assert isinstance(answer, FindCoordinatorResponse)
    assert [(c.key, c.error_code) for c in answer.coordinators] == [
        ("tx", ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    ]


async def test_list_groups_lists_only_the_groups_the_principal_may_describe() -> None:
    groups = [ListedGroup(group_id=g, protocol_type="consumer") for g in ("a", "b")]
    handler = Recorder(lambda r: ListGroupsResponse(groups=groups))
    auth = authorization(allow(Op.DESCRIBE, RT.GROUP, "b"))
    answer = await guarded(auth, ApiKey.LIST_GROUPS, handler)(ListGroupsRequest(), ctx())
    assert isinstance(answer, ListGroupsResponse)
    assert [g.group_id for g in answer.groups] == ["b"]


async def test_add_partitions_to_txn_refuses_a_topic_and_attempts_nothing_else() -> None:
    handler = Recorder(lambda r: AddPartitionsToTxnResponse())
    request = AddPartitionsToTxnRequest(
        transactions=[
            AddPartitionsToTxnTransaction(
                transactional_id="tx",
                producer_id=1,
                producer_epoch=0,
                topics=[AddPartitionsToTxnTopic(name=n, partitions=[0]) for n in ("a", "b")],
            )
        ]
    )
    auth = authorization(allow(Op.WRITE, RT.TRANSACTIONAL_ID, "tx"), allow(Op.WRITE, RT.TOPIC, "a"))
    answer = await guarded(auth, ApiKey.ADD_PARTITIONS_TO_TXN, handler)(request, ctx())
    assert isinstance(answer, AddPartitionsToTxnResponse)
    (result,) = answer.results_by_transaction
    assert {
        t.name: t.results_by_partition[0].partition_error_code for t in result.topic_results
    } == {
        "a": ErrorCode.OPERATION_NOT_ATTEMPTED,
        "b": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    }
    assert handler.seen == []


# -- the ACL APIs and UpdateMetadata ---------------------------------------------------------------


class NoForwarder:
    """The ACL APIs' refusals never reach the controller."""

    async def create_acls(self, request: Any) -> Any:
        raise AssertionError("forwarded")

    async def delete_acls(self, request: Any) -> Any:
        raise AssertionError("forwarded")


def broker_acls(auth: Authorization) -> BrokerAcls:
    return BrokerAcls(auth, NoForwarder())  # type: ignore[arg-type]


async def test_acl_apis_need_alter_or_describe_on_the_cluster() -> None:
    acls = broker_acls(authorization())
    created = await acls.create_acls(CreateAclsRequest(creations=[]), ctx())
    assert created.error_code == ErrorCode.NONE  # nothing asked: nothing to refuse per creation
    deleted = await acls.delete_acls(
        DeleteAclsRequest(
            filters=[
                DeleteAclsFilter(
                    resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1
                )
            ]
        ),
        ctx(),
    )
    assert deleted.filter_results[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED  # type: ignore[attr-defined]
    described = await acls.describe_acls(DescribeAclsRequest(), ctx())
    assert described.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


async def test_acl_apis_without_an_authorizer_answer_security_disabled() -> None:
    described = await broker_acls(authorization(enabled=False)).describe_acls(
        DescribeAclsRequest(), ctx(member=True)
    )
    assert described.error_code == ErrorCode.SECURITY_DISABLED


async def test_update_metadata_hands_the_acls_to_the_authorizer_once_accepted() -> None:
    auth = authorization()
    acls = broker_acls(auth)
    entry = UpdateMetadataAcl(
        resource_type=RT.TOPIC,
        resource_name="orders",
        pattern_type=PatternType.LITERAL,
        principal=ALICE,
        host="*",
        operation=Op.READ,
        permission_type=AclPermissionType.ALLOW,
    )
    request = UpdateMetadataRequest(
        controller_id=1, controller_epoch=1, partition_states=[], live_brokers=[], acls=[entry]
    )
    stale = acls.observe_update_metadata(
        Recorder(lambda r: UpdateMetadataResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH))
    )
    await stale(request, ctx(member=True))
    assert auth.authorizer.acls() == ()
    accepted = acls.observe_update_metadata(Recorder(lambda r: UpdateMetadataResponse()))
    await accepted(request, ctx(member=True))
    assert auth.authorizer.acls() == (allow(Op.READ, RT.TOPIC, "orders"),)
    described = await acls.describe_acls(DescribeAclsRequest(), ctx(member=True))
    assert isinstance(described, DescribeAclsResponse)
    assert [(r.resource_name, len(r.acls)) for r in described.resources] == [("orders", 1)]


# -- more of the guards ------------------------------------------------------------------------


async def test_fetch_refuses_topics_without_read_per_partition() -> None:
    handler = Recorder(lambda r: FetchResponse())
    request = FetchRequest(
        max_wait_ms=0,
        min_bytes=1,
        topics=[
            FetchTopic(
                topic=n,
                partitions=[FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1)],
            )
            for n in ("orders", "pay")
        ],
    )
    auth = authorization(allow(Op.READ, RT.TOPIC, "orders"))
    answer = await guarded(auth, ApiKey.FETCH, handler)(request, ctx())
    assert isinstance(answer, FetchResponse)
    assert [(t.topic, t.partitions[0].error_code) for t in answer.responses] == [
        ("pay", ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    ]
    assert [t.topic for t in handler.seen[0].topics] == ["orders"]  # type: ignore[attr-defined]


async def test_describe_configs_checks_topics_and_the_broker_apart() -> None:
    handler = Recorder(lambda r: DescribeConfigsResponse())
    request = DescribeConfigsRequest(
        resources=[
            DescribeConfigsResource(resource_type=RESOURCE_TOPIC, resource_name="orders"),
            DescribeConfigsResource(resource_type=RESOURCE_TOPIC, resource_name="pay"),
            DescribeConfigsResource(resource_type=RESOURCE_BROKER, resource_name="0"),
        ]
    )
    auth = authorization(allow(Op.ALTER_CONFIGS, RT.TOPIC, "orders"))  # implies DescribeConfigs
    answer = await guarded(auth, ApiKey.DESCRIBE_CONFIGS, handler)(request, ctx())
    assert isinstance(answer, DescribeConfigsResponse)
    assert [(r.resource_name, r.error_code) for r in answer.results] == [
        ("pay", ErrorCode.TOPIC_AUTHORIZATION_FAILED),
        ("0", ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    ]
    (seen,) = handler.seen
    assert [r.resource_name for r in seen.resources] == ["orders"]  # type: ignore[attr-defined]


async def test_offset_fetch_of_every_topic_leaves_out_those_without_describe() -> None:
    topics = [OffsetFetchResponseTopic(name=n, partitions=[]) for n in ("orders", "pay")]
    handler = Recorder(lambda r: OffsetFetchResponse(topics=topics))
    request = OffsetFetchRequest(group_id="g", topics=None)
    no_group = await guarded(authorization(), ApiKey.OFFSET_FETCH, handler)(request, ctx())
    assert isinstance(no_group, OffsetFetchResponse)
    assert no_group.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    auth = authorization(allow(Op.DESCRIBE, RT.GROUP, "g"), allow(Op.READ, RT.TOPIC, "orders"))
    answer = await guarded(auth, ApiKey.OFFSET_FETCH, handler)(request, ctx())
    assert isinstance(answer, OffsetFetchResponse)
    assert [t.name for t in answer.topics] == ["orders"]


async def test_describe_and_delete_groups_answer_each_refused_group() -> None:
    described = Recorder(lambda r: DescribeGroupsResponse())
    auth = authorization(allow(Op.DESCRIBE, RT.GROUP, "a"), allow(Op.DELETE, RT.GROUP, "a"))
    answer = await guarded(auth, ApiKey.DESCRIBE_GROUPS, described)(
        DescribeGroupsRequest(groups=["a", "b"]), ctx()
    )
    assert isinstance(answer, DescribeGroupsResponse)
    assert [(g.group_id, g.error_code) for g in answer.groups] == [
        ("b", ErrorCode.GROUP_AUTHORIZATION_FAILED)
    ]
    deleted = Recorder(lambda r: DeleteGroupsResponse())
    answer = await guarded(auth, ApiKey.DELETE_GROUPS, deleted)(
        DeleteGroupsRequest(groups_names=["a", "b"]), ctx()
    )
    assert isinstance(answer, DeleteGroupsResponse)
    assert [(g.group_id, g.error_code) for g in answer.results] == [
        ("b", ErrorCode.GROUP_AUTHORIZATION_FAILED)
    ]
    assert deleted.seen[0].groups_names == ["a"]  # type: ignore[attr-defined]


async def test_transaction_apis_need_write_on_the_transactional_id() -> None:
    handler = Recorder(lambda r: EndTxnResponse())
    request = EndTxnRequest(transactional_id="tx", producer_id=1, producer_epoch=0, committed=True)
    refused = await guarded(authorization(), ApiKey.END_TXN, handler)(request, ctx())
    assert isinstance(refused, EndTxnResponse)
    assert refused.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    commit = Recorder(lambda r: TxnOffsetCommitResponse())
    offsets = TxnOffsetCommitRequest(
        transactional_id="tx",
        group_id="g",
        producer_id=1,
        producer_epoch=0,
        topics=[
            TxnOffsetCommitRequestTopic(
                name="orders",
                partitions=[TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1)],
            )
        ],
    )
    no_group = authorization(allow(Op.WRITE, RT.TRANSACTIONAL_ID, "tx"))
    answer = await guarded(no_group, ApiKey.TXN_OFFSET_COMMIT, commit)(offsets, ctx())
    assert isinstance(answer, TxnOffsetCommitResponse)
    assert answer.topics[0].partitions[0].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert commit.seen == []


async def test_describe_cluster_needs_describe_on_the_cluster() -> None:
    handler = Recorder(lambda r: DescribeClusterResponse())
    refused = await guarded(authorization(), ApiKey.DESCRIBE_CLUSTER, handler)(
        DescribeClusterRequest(), ctx()
    )
    assert isinstance(refused, DescribeClusterResponse)
    assert refused.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    auth = authorization(allow(Op.DESCRIBE, RT.CLUSTER, "kafka-cluster"))
    answer = await guarded(auth, ApiKey.DESCRIBE_CLUSTER, handler)(DescribeClusterRequest(), ctx())
    assert isinstance(answer, DescribeClusterResponse)
    assert answer.error_code == ErrorCode.NONE
