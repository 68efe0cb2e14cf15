"""`BrokerAcls`: a broker's ACL APIs (DescribeAcls, CreateAcls, DeleteAcls) on both listeners,
and the ACL set the controller sends it.

- CreateAcls and DeleteAcls need ALTER on the cluster and go to the controller (KIP-590, through
  `ControllerForwarder`), which stores them in its metadata log (actors/controller/acls.py);
- DescribeAcls needs DESCRIBE on the cluster and is answered from this broker's ACL set, as
  Kafka's brokers answer it from their authorizer (the set may trail a creation by one
  UpdateMetadata);
- refused: CLUSTER_AUTHORIZATION_FAILED; without an authorizer (authorizer.class.name empty)
  SECURITY_DISABLED, as Kafka answers. Errors are answered per creation and per filter (the
  Kafka responses have no top-level code).

The controller sends the whole ACL set in an UpdateMetadata when it changes and when the broker
registers; `observe_update_metadata` wraps the UpdateMetadata handler and hands the set to the
authorizer once the replica manager accepted the request (a stale controller's set is ignored).

Ownership: the authorizer's set is replaced on the event loop between requests; the handlers only
read it or forward.
"""

from __future__ import annotations

from collections.abc import Iterable

from actors.acl.authorizer import Authorizer
from actors.acl.bindings import AclBinding, AclBindingFilter, AclOperation
from node.broker.authorization import Authorization
from node.broker.forwarder import ControllerForwarder
from runtime.net.dialect import Handler, RequestContext
from wire.errors import ErrorCode
from wire.messages import (
    AclCreationResult,
    AclDescription,
    ApiKey,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsFilterResult,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResource,
    DescribeAclsResponse,
    Request,
    Response,
    UpdateMetadataAcl,
    UpdateMetadataRequest,
)

_DISABLED = "No Authorizer is configured on the broker"


def bindings_of(entries: Iterable[UpdateMetadataAcl]) -> list[AclBinding]:
    return [
        AclBinding.of(
            e.resource_type,
            e.resource_name,
            e.pattern_type,
            e.principal,
            e.host,
            e.operation,
            e.permission_type,
        )
        for e in entries
    ]


class BrokerAcls:
    """The ACL APIs' handlers and the UpdateMetadata observer (module docstring)."""

    def __init__(self, authorization: Authorization, forwarder: ControllerForwarder) -> None:
        self._authorization = authorization
        self._authorizer: Authorizer = authorization.authorizer
        self._forwarder = forwarder

    def table(self) -> dict[int, Handler]:
        return {
            ApiKey.DESCRIBE_ACLS: self.describe_acls,
            ApiKey.CREATE_ACLS: self.create_acls,
            ApiKey.DELETE_ACLS: self.delete_acls,
        }

    def observe_update_metadata(self, handler: Handler) -> Handler:
        async def handle(request: Request, ctx: RequestContext) -> Response | None:
            answer: Response | None = await handler(request, ctx)
            assert isinstance(request, UpdateMetadataRequest), request
            accepted = answer is not None and answer.error_code == ErrorCode.NONE
            if accepted and request.acls is not None:
                self._authorizer.set_acls(bindings_of(request.acls))
            return answer

        return handle

    def _refusal(
        self, ctx: RequestContext, op: AclOperation
    ) -> tuple[ErrorCode, str | None] | None:
        if not self._authorizer.enabled:
            return ErrorCode.SECURITY_DISABLED, _DISABLED
        if not self._authorization.on_cluster(ctx, op):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, f"{op.name} on the cluster is needed"
        return None

    async def create_acls(self, request: CreateAclsRequest, ctx: RequestContext) -> Response:
        refused = self._refusal(ctx, AclOperation.ALTER)
        if refused is None:
            answer = await self._forwarder.create_acls(request)
            if answer.error_code == ErrorCode.NONE:
                return answer
            refused = answer.error, None  # the forward failed: every creation carries it
        code, message = refused
        return CreateAclsResponse(
            results=[
                AclCreationResult(error_code=code, error_message=message) for _ in request.creations
            ]
        )

    async def delete_acls(self, request: DeleteAclsRequest, ctx: RequestContext) -> Response:
        refused = self._refusal(ctx, AclOperation.ALTER)
        if refused is None:
            answer = await self._forwarder.delete_acls(request)
            if answer.error_code == ErrorCode.NONE:
                return answer
            refused = answer.error, None
        code, message = refused
        return DeleteAclsResponse(
            filter_results=[
                DeleteAclsFilterResult(error_code=code, error_message=message)
                for _ in request.filters
            ]
        )

    async def describe_acls(self, request: DescribeAclsRequest, ctx: RequestContext) -> Response:
        refused = self._refusal(ctx, AclOperation.DESCRIBE)
        if refused is not None:
            return DescribeAclsResponse(error_code=refused[0], error_message=refused[1])
        try:
            acl_filter = AclBindingFilter.of(
                request.resource_type_filter,
                request.resource_name_filter,
                request.pattern_type_filter,
                request.principal_filter,
                request.host_filter,
                request.operation,
                request.permission_type,
            )
        except ValueError as error:
            return DescribeAclsResponse(
                error_code=ErrorCode.INVALID_REQUEST, error_message=str(error)
            )
        problem = acl_filter.problem()
        if problem is not None:
            return DescribeAclsResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=problem)
        return DescribeAclsResponse(resources=describe(self._authorizer.acls(), acl_filter))


def describe(
    acls: Iterable[AclBinding], acl_filter: AclBindingFilter
) -> list[DescribeAclsResource]:
    """The ACLs `acl_filter` matches, grouped by resource pattern (DescribeAcls' shape)."""
    by_resource: dict[tuple[int, str, int], list[AclDescription]] = {}
    for acl in acls:
        if acl_filter.matches(acl):
            by_resource.setdefault((acl.resource_type, acl.name, acl.pattern_type), []).append(
                AclDescription(
                    principal=acl.principal,
                    host=acl.host,
                    operation=acl.operation,
                    permission_type=acl.permission_type,
                )
            )
    return [
        DescribeAclsResource(
            resource_type=kind, resource_name=name, pattern_type=pattern, acls=descriptions
        )
        for (kind, name, pattern), descriptions in by_resource.items()
    ]
