"""`Authorizer`: whether a principal may do an operation on a resource, by Kafka's
StandardAuthorizer rules (KIP-801; the same decisions as the older AclAuthorizer).

Configuration (broker properties, Kafka's names):

    authorizer.class.name            empty (the default): no authorization at all, every request
                                     is served as before; `org.apache.kafka.metadata.authorizer.
                                     StandardAuthorizer`: the ACLs below decide. Anything else is
                                     refused when the configuration is read.
    super.users                      `User:a;User:b`: principals allowed everything, whatever
                                     the ACLs say
    allow.everyone.if.no.acl.found   false (the default): a resource no ACL names is refused to
                                     everyone but super users; true: allowed to everyone

`authorize(principal, host, operation, resource type, name)`, in Kafka's order:

1. a super user is allowed;
2. the ACLs that apply to the resource are its LITERAL ones, the LITERAL wildcard `*` of its
   type, and every PREFIXED one whose prefix starts its name. None at all: allowed only with
   allow.everyone.if.no.acl.found;
3. of those, the ones for this principal (or `User:*`) and host (or `*`) decide: a DENY of the
   operation (or of ALL) refuses, and wins over any ALLOW; otherwise an ALLOW of the operation, of
   ALL, or of an operation that implies it allows (DESCRIBE is implied by READ, WRITE, DELETE and
   ALTER; DESCRIBE_CONFIGS by ALTER_CONFIGS; an implied operation never extends a DENY);
4. otherwise refused.

`authorize_any(principal, host, operation, resource type)` is Kafka's
`authorizeByResourceType` (KIP-679: an idempotent producer needs IDEMPOTENT_WRITE on the
cluster or WRITE on *some* topic): allowed when some ALLOW of the operation (or ALL) for the
principal and host is not covered by a DENY — a LITERAL allow by no DENY of the same name or of
a prefix of it, a PREFIXED allow by no DENY prefix of its prefix; a DENY of the wildcard `*`
refuses everything. ketch's choice for allow.everyone.if.no.acl.found there: allowed when no ACL
of that resource type exists at all, as `authorize` answers a resource no ACL names.

Owner: the broker's event loop. The ACL set is replaced whole (`set_acls`, from the controller's
UpdateMetadata) between requests, never during a decision, so readers need no lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from actors.acl.bindings import (
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from runtime.properties import config_from_properties

STANDARD_AUTHORIZER: Final = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
NO_AUTHORIZER: Final = ""

# The operations an ALLOW of the key also allows (Kafka's AclEntry implied operations).
_IMPLIED_BY: Final[Mapping[AclOperation, frozenset[AclOperation]]] = {
    AclOperation.DESCRIBE: frozenset(
        {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.ALTER_CONFIGS}),
}


def parse_super_users(text: str) -> frozenset[str]:
    """super.users: principals separated by `;` (Kafka's separator: a principal may hold `,`)."""
    return frozenset(p.strip() for p in text.split(";") if p.strip())


@dataclass(frozen=True, slots=True)
class AuthorizerConfig:
    """The settings under Kafka's property names and defaults (see the module docstring)."""

    authorizer_class_name: str = NO_AUTHORIZER
    super_users: str = ""
    allow_everyone_if_no_acl_found: bool = False

    def __post_init__(self) -> None:
        if self.authorizer_class_name not in (NO_AUTHORIZER, STANDARD_AUTHORIZER):
            raise ValueError(
                f"authorizer.class.name must be empty or {STANDARD_AUTHORIZER}: "
                f"{self.authorizer_class_name!r}"
            )
        for principal in parse_super_users(self.super_users):
            if ":" not in principal:
                raise ValueError(f"super.users: {principal!r} is not a TYPE:NAME principal")

    @property
    def enabled(self) -> bool:
        return self.authorizer_class_name != NO_AUTHORIZER

    @classmethod
    def from_properties(cls, properties: Mapping[str, object]) -> AuthorizerConfig:
        return config_from_properties(cls, properties)


def _allows(acl_operation: AclOperation, operation: AclOperation) -> bool:
    return acl_operation in (AclOperation.ALL, operation) or acl_operation in _IMPLIED_BY.get(
        operation, ()
    )


def _covered(name: str, prefixes: Iterable[str]) -> bool:
    return any(name.startswith(prefix) for prefix in prefixes)


class Authorizer:
    """The ACL set and the configuration, and the decisions of the module docstring."""

    def __init__(self, config: AuthorizerConfig) -> None:
        self.config = config
        self._super_users = parse_super_users(config.super_users)
        self._acls: tuple[AclBinding, ...] = ()
        self._literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        self._prefixed: dict[ResourceType, list[AclBinding]] = {}
        self._by_type: dict[ResourceType, list[AclBinding]] = {}

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    def set_acls(self, acls: Iterable[AclBinding]) -> None:
        """Replace the whole ACL set (each UpdateMetadata that carries ACLs carries all)."""
        self._acls = tuple(acls)
        literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        prefixed: dict[ResourceType, list[AclBinding]] = {}
        by_type: dict[ResourceType, list[AclBinding]] = {}
        for acl in self._acls:
            by_type.setdefault(acl.resource_type, []).append(acl)
            if acl.pattern_type is PatternType.PREFIXED:
                prefixed.setdefault(acl.resource_type, []).append(acl)
            else:
                literal.setdefault((acl.resource_type, acl.name), []).append(acl)
        self._literal, self._prefixed, self._by_type = literal, prefixed, by_type

    def acls(self) -> tuple[AclBinding, ...]:
        return self._acls

    def is_super_user(self, principal: str) -> bool:
        return principal in self._super_users

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        if principal in self._super_users:
            return True
        applying = [
            *self._literal.get((resource_type, name), ()),
            *self._literal.get((resource_type, WILDCARD_RESOURCE), ()),
            *(acl for acl in self._prefixed.get(resource_type, ()) if name.startswith(acl.name)),
        ]
        if not applying:
            return self.config.allow_everyone_if_no_acl_found
        allowed = False
        for acl in applying:
            if not self._for(acl, principal, host):
                continue
            if acl.permission_type is AclPermissionType.DENY:
                if acl.operation in (AclOperation.ALL, operation):
                    return False
            elif _allows(acl.operation, operation):
                allowed = True
        return allowed

    def authorize_any(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        if principal in self._super_users:
            return True
        acls = self._by_type.get(resource_type, ())
        if not acls:
            return self.config.allow_everyone_if_no_acl_found
        allowed_literals: list[str] = []
        allowed_prefixes: list[str] = []
        denied_literals: set[str] = set()
        denied_prefixes: list[str] = []
        for acl in acls:
            if not self._for(acl, principal, host) or acl.operation not in (
                AclOperation.ALL,
                operation,
            ):
                continue
            prefixed = acl.pattern_type is PatternType.PREFIXED
            if acl.permission_type is AclPermissionType.DENY:
                if not prefixed and acl.name == WILDCARD_RESOURCE:
                    return False
                (denied_prefixes.append if prefixed else denied_literals.add)(acl.name)
            else:
                (allowed_prefixes if prefixed else allowed_literals).append(acl.name)
        if any(
            name not in denied_literals and not _covered(name, denied_prefixes)
            for name in allowed_literals
        ):
            return True
        return any(not _covered(prefix, denied_prefixes) for prefix in allowed_prefixes)

    @staticmethod
    def _for(acl: AclBinding, principal: str, host: str) -> bool:
        return acl.principal in (principal, WILDCARD_PRINCIPAL) and acl.host in (
            host,
            WILDCARD_HOST,
        )
