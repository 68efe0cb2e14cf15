"""ACL administration, version 0 of ketch's native protocol: DescribeAcls (29), CreateAcls (30)
and DeleteAcls (31), and the ACL entries UpdateMetadata carries to the brokers.

Field names are Kafka's JSON message specs (DescribeAclsRequest.json, CreateAclsRequest.json,
DeleteAclsRequest.json and their responses) in snake_case, so the Kafka listener converts them
field by field. The Int8 codes are Kafka's ResourceType, PatternType, AclOperation and
AclPermissionType ids (actors/acl/bindings.py names them).

Brokers forward CreateAcls and DeleteAcls to the controller, which stores ACLs in its metadata
log; a broker answers DescribeAcls from the ACLs the controller last sent it. CreateAcls and
DeleteAcls are answered per creation and per filter (their Kafka responses have no top-level
error code).
"""

# No `from __future__ import annotations`: the codec reads each field's type at class creation.

from dataclasses import dataclass, field

from wire.messages.base import ApiKey, Request, Response
from wire.messages.fields import Int8, Int16

# -- DescribeAcls (29) -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class AclDescription:
    principal: str
    host: str
    operation: Int8
    permission_type: Int8


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeAclsResource:
    resource_type: Int8
    resource_name: str
    pattern_type: Int8
    acls: list[AclDescription] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeAclsResponse(Response):
    API_KEY = ApiKey.DESCRIBE_ACLS
    API_VERSION = 0
    error_message: str | None = None
    resources: list[DescribeAclsResource] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeAclsRequest(Request):
    """None / 1 (ANY) leave a field open; pattern type 2 (MATCH) finds the ACLs that apply."""

    API_KEY = ApiKey.DESCRIBE_ACLS
    API_VERSION = 0
    RESPONSE = DescribeAclsResponse
    resource_type_filter: Int8 = 1
    resource_name_filter: str | None = None
    pattern_type_filter: Int8 = 1
    principal_filter: str | None = None
    host_filter: str | None = None
    operation: Int8 = 1
    permission_type: Int8 = 1


# -- CreateAcls (30) -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class AclCreation:
    resource_type: Int8
    resource_name: str
    resource_pattern_type: Int8
    principal: str
    host: str
    operation: Int8
    permission_type: Int8


@dataclass(frozen=True, slots=True, kw_only=True)
class AclCreationResult:
    error_code: Int16 = 0
    error_message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateAclsResponse(Response):
    """One result per creation, in request order."""

    API_KEY = ApiKey.CREATE_ACLS
    API_VERSION = 0
    results: list[AclCreationResult] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateAclsRequest(Request):
    API_KEY = ApiKey.CREATE_ACLS
    API_VERSION = 0
    RESPONSE = CreateAclsResponse
    creations: list[AclCreation]


# -- DeleteAcls (31) -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteAclsFilter:
    resource_type_filter: Int8
    resource_name_filter: str | None = None
    pattern_type_filter: Int8
    principal_filter: str | None = None
    host_filter: str | None = None
    operation: Int8
    permission_type: Int8


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteAclsMatchingAcl:
    error_code: Int16 = 0
    error_message: str | None = None
    resource_type: Int8
    resource_name: str
    pattern_type: Int8
    principal: str
    host: str
    operation: Int8
    permission_type: Int8


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteAclsFilterResult:
    error_code: Int16 = 0
    error_message: str | None = None
    matching_acls: list[DeleteAclsMatchingAcl] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteAclsResponse(Response):
    """One result per filter, in request order, each with the ACLs it deleted."""

    API_KEY = ApiKey.DELETE_ACLS
    API_VERSION = 0
    filter_results: list[DeleteAclsFilterResult] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteAclsRequest(Request):
    API_KEY = ApiKey.DELETE_ACLS
    API_VERSION = 0
    RESPONSE = DeleteAclsResponse
    filters: list[DeleteAclsFilter]


# -- UpdateMetadata's ACLs -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataAcl:
    """One ACL as the controller sends it to the brokers (an UpdateMetadata that carries ACLs
    carries all of them)."""

    resource_type: Int8
    resource_name: str
    pattern_type: Int8
    principal: str
    host: str
    operation: Int8
    permission_type: Int8
