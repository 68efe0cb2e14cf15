"""ACL bindings and filters: what an ACL says and which ACLs a DescribeAcls or DeleteAcls names.

An ACL binding is a resource pattern (resource type, name, pattern type) and an access control
entry (principal, host, operation, permission type), Kafka's `AclBinding`. The numeric ids of the
four enums are Kafka's (`ResourceType`, `PatternType`, `AclOperation`, `AclPermissionType`): they
are what the Kafka protocol carries and what the controller's metadata records store.

A stored binding names definite values only: a resource type TOPIC, GROUP, CLUSTER or
TRANSACTIONAL_ID, a pattern type LITERAL or PREFIXED, an operation other than ANY, and ALLOW or
DENY (`binding_problem` says why one is not). The wildcards are values of their own: resource
name `*` (every resource of the type, LITERAL only), principal `User:*` and host `*`.

A filter (`AclBindingFilter`, Kafka's `AclBindingFilter`) may leave a field open (None for the
strings, ANY for the enums); pattern type MATCH selects the bindings that would apply to the
named resource: its LITERAL binding, the LITERAL wildcard `*` and every PREFIXED binding whose
prefix starts the name (Kafka's `ResourcePatternFilter.matches`).

Values only: frozen dataclasses, no state.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME: Final = "kafka-cluster"  # the one CLUSTER resource's name
WILDCARD_RESOURCE: Final = "*"
WILDCARD_PRINCIPAL: Final = "User:*"
WILDCARD_HOST: Final = "*"

STORED_RESOURCE_TYPES: Final = frozenset(
    {ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID}
)
STORED_PATTERN_TYPES: Final = frozenset({PatternType.LITERAL, PatternType.PREFIXED})


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: `permission_type` of `operation` for `principal` from `host` on the resources
    `name` (with `pattern_type`) names."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    @classmethod
    def of(
        cls,
        resource_type: int,
        name: str,
        pattern_type: int,
        principal: str,
        host: str,
        operation: int,
        permission_type: int,
    ) -> AclBinding:
        """A binding from wire ids; ValueError for an id Kafka does not define."""
        return cls(
            ResourceType(resource_type),
            name,
            PatternType(pattern_type),
            principal,
            host,
            AclOperation(operation),
            AclPermissionType(permission_type),
        )


def is_principal(text: str) -> bool:
    """Kafka's `TYPE:NAME` principal form (`SecurityUtils.parseKafkaPrincipal`)."""
    kind, sep, name = text.partition(":")
    return bool(sep and kind and name)


def binding_problem(binding: AclBinding) -> str | None:
    """Why `binding` cannot be stored (Kafka's AclControlManager.validateNewAcl answers these
    INVALID_REQUEST), or None."""
    if binding.resource_type not in STORED_RESOURCE_TYPES:
        return f"Invalid resourceType {binding.resource_type.name}"
    if binding.pattern_type not in STORED_PATTERN_TYPES:
        return f"Invalid patternType {binding.pattern_type.name}"
    if binding.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        return f"Invalid operation {binding.operation.name}"
    if binding.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permissionType {binding.permission_type.name}"
    if not binding.name:
        return "Resource name should not be empty"
    if binding.resource_type is ResourceType.CLUSTER and binding.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if binding.pattern_type is PatternType.PREFIXED and binding.name == WILDCARD_RESOURCE:
        return "A PREFIXED pattern cannot be the wildcard '*': use LITERAL"
    if not is_principal(binding.principal):
        return f"Could not parse principal from `{binding.principal}` (no colon is present)"
    if not binding.host:
        return "Invalid host: an ACL's host is an IP address or '*'"
    return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Which bindings a DescribeAcls or DeleteAcls names; None and ANY match anything."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    @classmethod
    def of(
        cls,
        resource_type: int,
        name: str | None,
        pattern_type: int,
        principal: str | None,
        host: str | None,
        operation: int,
        permission_type: int,
    ) -> AclBindingFilter:
        """A filter from wire ids; ValueError for an id Kafka does not define."""
        return cls(
            ResourceType(resource_type),
            name,
            PatternType(pattern_type),
            principal,
            host,
            AclOperation(operation),
            AclPermissionType(permission_type),
        )

    def problem(self) -> str | None:
        """Why the filter cannot be used (an UNKNOWN field: Kafka answers INVALID_REQUEST)."""
        unknown = [
            name
            for name, value in (
                ("resourceType", self.resource_type),
                ("patternType", self.pattern_type),
                ("operation", self.operation),
                ("permissionType", self.permission_type),
            )
            if value.name == "UNKNOWN"
        ]
        return f"Unknown {', '.join(unknown)} in the filter" if unknown else None

    def matches(self, binding: AclBinding) -> bool:
        return (
            self._matches_pattern(binding)
            and (self.principal is None or self.principal == binding.principal)
            and (self.host is None or self.host == binding.host)
            and self.operation in (AclOperation.ANY, binding.operation)
            and self.permission_type in (AclPermissionType.ANY, binding.permission_type)
        )

    def _matches_pattern(self, binding: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, binding.resource_type):
            return False
        if self.pattern_type is PatternType.MATCH:
            if self.name is None:
                return True
            if binding.pattern_type is PatternType.PREFIXED:
                return self.name.startswith(binding.name)
            return binding.name in (self.name, WILDCARD_RESOURCE)
        if self.pattern_type not in (PatternType.ANY, binding.pattern_type):
            return False
        return self.name is None or self.name == binding.name
