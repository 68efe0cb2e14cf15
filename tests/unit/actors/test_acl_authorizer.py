"""The authorizer's rules (actors/acl/authorizer.py) and the bindings' checks and filters
(actors/acl/bindings.py), one rule per test."""

from __future__ import annotations

import pytest

from actors.acl.authorizer import STANDARD_AUTHORIZER, Authorizer, AuthorizerConfig
from actors.acl.bindings import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    binding_problem,
)

Op = AclOperation
RT = ResourceType
ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
ALICE = "User:alice"
BOB = "User:bob"
HOST = "10.0.0.1"


def acl(
    op: AclOperation,
    name: str = "orders",
    *,
    kind: ResourceType = RT.TOPIC,
    pattern: PatternType = PatternType.LITERAL,
    principal: str = ALICE,
    host: str = "*",
    permission: AclPermissionType = ALLOW,
) -> AclBinding:
    return AclBinding(kind, name, pattern, principal, host, op, permission)


def authorizer(
    *acls: AclBinding, super_users: str = "", allow_everyone_if_no_acl_found: bool = False
) -> Authorizer:
    config = AuthorizerConfig(
        authorizer_class_name=STANDARD_AUTHORIZER,
        super_users=super_users,
        allow_everyone_if_no_acl_found=allow_everyone_if_no_acl_found,
    )
    result = Authorizer(config)
    result.set_acls(acls)
    return result


def may(
    auth: Authorizer,
    op: AclOperation,
    name: str = "orders",
    *,
    kind: ResourceType = RT.TOPIC,
    principal: str = ALICE,
    host: str = HOST,
) -> bool:
    return auth.authorize(principal, host, op, kind, name)


# -- configuration ---------------------------------------------------------------------------------


def test_authorizer_is_off_by_default_and_on_with_standard_authorizer() -> None:
    assert not AuthorizerConfig().enabled
    assert AuthorizerConfig.from_properties({"authorizer.class.name": STANDARD_AUTHORIZER}).enabled


def test_an_unknown_authorizer_class_is_refused() -> None:
    with pytest.raises(ValueError, match=r"authorizer\.class\.name"):
        AuthorizerConfig(authorizer_class_name="kafka.security.authorizer.Other")


def test_super_users_are_allowed_everything_without_acls() -> None:
    auth = authorizer(super_users="User:admin; User:ops")
    assert may(auth, Op.ALTER, principal="User:ops")
    assert may(auth, Op.CLUSTER_ACTION, CLUSTER_NAME, kind=RT.CLUSTER, principal="User:admin")
    assert not may(auth, Op.READ, principal=ALICE)


def test_super_users_are_allowed_even_against_a_deny() -> None:
    auth = authorizer(
        acl(Op.ALL, principal="User:admin", permission=DENY), super_users="User:admin"
    )
    assert may(auth, Op.WRITE, principal="User:admin")


# -- no ACLs ---------------------------------------------------------------------------------------


def test_a_resource_without_acls_is_refused_by_default() -> None:
    assert not may(authorizer(), Op.READ)


def test_allow_everyone_if_no_acl_found_allows_a_resource_without_acls() -> None:
    auth = authorizer(allow_everyone_if_no_acl_found=True)
    assert may(auth, Op.READ)


def test_allow_everyone_does_not_apply_once_the_resource_has_an_acl() -> None:
    auth = authorizer(acl(Op.READ, principal=BOB), allow_everyone_if_no_acl_found=True)
    assert not may(auth, Op.READ, principal=ALICE)
    assert may(auth, Op.READ, "payments", principal=ALICE)  # no ACL names payments


# -- allow, deny, operations -----------------------------------------------------------------------


def test_an_allow_grants_its_operation_only() -> None:
    auth = authorizer(acl(Op.WRITE))
    assert may(auth, Op.WRITE)
    assert not may(auth, Op.READ)
    assert not may(auth, Op.WRITE, principal=BOB)


def test_deny_wins_over_allow() -> None:
    auth = authorizer(acl(Op.READ), acl(Op.READ, permission=DENY))
    assert not may(auth, Op.READ)


def test_allow_all_grants_every_operation_and_deny_all_refuses_every_one() -> None:
    assert may(authorizer(acl(Op.ALL)), Op.DELETE)
    assert not may(authorizer(acl(Op.ALL), acl(Op.ALL, permission=DENY)), Op.DESCRIBE)


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER])
def test_describe_is_implied_by_read_write_delete_and_alter(granted: AclOperation) -> None:
    assert may(authorizer(acl(granted)), Op.DESCRIBE)


def test_describe_is_not_implied_by_create() -> None:
    assert not may(authorizer(acl(Op.CREATE)), Op.DESCRIBE)


def test_describe_configs_is_implied_by_alter_configs() -> None:
    auth = authorizer(acl(Op.ALTER_CONFIGS))
    assert may(auth, Op.DESCRIBE_CONFIGS)
    assert not may(auth, Op.DESCRIBE)


def test_a_deny_of_read_does_not_deny_the_describe_it_would_imply() -> None:
    auth = authorizer(acl(Op.DESCRIBE), acl(Op.READ, permission=DENY))
    assert may(auth, Op.DESCRIBE)
    assert not may(auth, Op.READ)


# -- wildcards and patterns ------------------------------------------------------------------------


def test_wildcard_principal_matches_everyone() -> None:
    auth = authorizer(acl(Op.READ, principal="User:*"))
    assert may(auth, Op.READ, principal=BOB)
    assert may(auth, Op.READ, principal="User:ANONYMOUS")


def test_wildcard_resource_matches_every_name_of_its_type_only() -> None:
    auth = authorizer(acl(Op.READ, "*"))
    assert may(auth, Op.READ, "anything")
    assert not may(auth, Op.READ, "anything", kind=RT.GROUP)


def test_prefixed_pattern_matches_names_starting_with_it() -> None:
    auth = authorizer(acl(Op.WRITE, "logs-", pattern=PatternType.PREFIXED))
    assert may(auth, Op.WRITE, "logs-app")
    assert may(auth, Op.WRITE, "logs-")
    assert not may(auth, Op.WRITE, "log")
    assert not may(auth, Op.WRITE, "app-logs-")


def test_literal_pattern_matches_its_name_exactly() -> None:
    auth = authorizer(acl(Op.WRITE, "logs"))
    assert not may(auth, Op.WRITE, "logs-app")


def test_a_prefixed_deny_overrides_a_literal_allow() -> None:
    auth = authorizer(
        acl(Op.READ), acl(Op.READ, "ord", pattern=PatternType.PREFIXED, permission=DENY)
    )
    assert not may(auth, Op.READ)


def test_host_must_match_or_be_the_wildcard() -> None:
    auth = authorizer(acl(Op.READ, host="10.0.0.9"))
    assert may(auth, Op.READ, host="10.0.0.9")
    assert not may(auth, Op.READ, host=HOST)


def test_a_deny_for_one_host_leaves_other_hosts_allowed() -> None:
    auth = authorizer(acl(Op.READ), acl(Op.READ, host="10.0.0.9", permission=DENY))
    assert not may(auth, Op.READ, host="10.0.0.9")
    assert may(auth, Op.READ, host=HOST)


def test_resource_types_are_kept_apart() -> None:
    auth = authorizer(acl(Op.READ, "billing", kind=RT.GROUP))
    assert may(auth, Op.READ, "billing", kind=RT.GROUP)
    assert not may(auth, Op.READ, "billing", kind=RT.TOPIC)


def test_set_acls_replaces_the_whole_set() -> None:
    auth = authorizer(acl(Op.READ))
    auth.set_acls([acl(Op.WRITE)])
    assert not may(auth, Op.READ)
    assert may(auth, Op.WRITE)
    assert auth.acls() == (acl(Op.WRITE),)


# -- by resource type (KIP-679) --------------------------------------------------------------------


def test_authorize_any_allows_with_an_allow_on_some_topic() -> None:
    auth = authorizer(acl(Op.WRITE, "orders"))
    assert auth.authorize_any(ALICE, HOST, Op.WRITE, RT.TOPIC)
    assert not auth.authorize_any(BOB, HOST, Op.WRITE, RT.TOPIC)
    assert not auth.authorize_any(ALICE, HOST, Op.READ, RT.TOPIC)


def test_authorize_any_refuses_a_literal_allow_denied_by_a_prefix() -> None:
    auth = authorizer(
        acl(Op.WRITE, "orders"),
        acl(Op.WRITE, "ord", pattern=PatternType.PREFIXED, permission=DENY),
    )
    assert not auth.authorize_any(ALICE, HOST, Op.WRITE, RT.TOPIC)


def test_authorize_any_allows_a_prefix_not_covered_by_a_denied_prefix() -> None:
    auth = authorizer(
        acl(Op.WRITE, "logs-", pattern=PatternType.PREFIXED),
        acl(Op.WRITE, "orders", permission=DENY),
    )
    assert auth.authorize_any(ALICE, HOST, Op.WRITE, RT.TOPIC)


def test_authorize_any_is_refused_by_a_denied_wildcard() -> None:
    auth = authorizer(acl(Op.WRITE, "orders"), acl(Op.WRITE, "*", permission=DENY))
    assert not auth.authorize_any(ALICE, HOST, Op.WRITE, RT.TOPIC)


def test_authorize_any_without_acls_follows_allow_everyone() -> None:
    assert not authorizer().authorize_any(ALICE, HOST, Op.WRITE, RT.TOPIC)
    assert authorizer(allow_everyone_if_no_acl_found=True).authorize_any(
        ALICE, HOST, Op.WRITE, RT.TOPIC
    )


# -- bindings and filters --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("binding", "reason"),
    [
        (acl(Op.READ, kind=RT.ANY), "resourceType"),
        (acl(Op.READ, pattern=PatternType.MATCH), "patternType"),
        (acl(Op.ANY), "operation"),
        (acl(Op.READ, permission=AclPermissionType.ANY), "permissionType"),
        (acl(Op.READ, ""), "empty"),
        (acl(Op.ALTER, "my-cluster", kind=RT.CLUSTER), CLUSTER_NAME),
        (acl(Op.READ, principal="alice"), "principal"),
        (acl(Op.READ, "*", pattern=PatternType.PREFIXED), "PREFIXED"),
    ],
)
def test_bindings_that_cannot_be_stored(binding: AclBinding, reason: str) -> None:
    problem = binding_problem(binding)
    assert problem is not None
    assert reason in problem


def test_a_valid_binding_has_no_problem() -> None:
    assert binding_problem(acl(Op.ALTER, CLUSTER_NAME, kind=RT.CLUSTER)) is None


def test_filter_any_matches_everything() -> None:
    assert AclBindingFilter().matches(acl(Op.READ, "x", pattern=PatternType.PREFIXED))


def test_filter_fields_each_narrow_the_match() -> None:
    binding = acl(Op.READ)
    assert AclBindingFilter(principal=ALICE, operation=Op.READ).matches(binding)
    assert not AclBindingFilter(principal=BOB).matches(binding)
    assert not AclBindingFilter(host=HOST).matches(binding)
    assert not AclBindingFilter(permission_type=DENY).matches(binding)
    assert not AclBindingFilter(resource_type=RT.GROUP).matches(binding)
    assert not AclBindingFilter(pattern_type=PatternType.PREFIXED).matches(binding)
    assert not AclBindingFilter(name="payments").matches(binding)


def test_filter_match_finds_the_acls_that_apply_to_a_name() -> None:
    match = AclBindingFilter(name="orders-eu", pattern_type=PatternType.MATCH)
    assert match.matches(acl(Op.READ, "orders-eu"))
    assert match.matches(acl(Op.READ, "*"))
    assert match.matches(acl(Op.READ, "orders-", pattern=PatternType.PREFIXED))
    assert not match.matches(acl(Op.READ, "orders"))
    assert not match.matches(acl(Op.READ, "payments-", pattern=PatternType.PREFIXED))


def test_filter_literal_does_not_treat_the_wildcard_as_a_match() -> None:
    literal = AclBindingFilter(name="orders", pattern_type=PatternType.LITERAL)
    assert not literal.matches(acl(Op.READ, "*"))


def test_a_filter_with_an_unknown_field_is_a_problem() -> None:
    assert AclBindingFilter(operation=Op.UNKNOWN).problem() is not None
    assert AclBindingFilter().problem() is None
