"""`ketch acl add|list|remove`: ACLs, with kafka-acls' options.

    ketch acl add --allow-principal User:alice --operation Read --operation Describe \\
        --topic orders --group billing
    ketch acl add --deny-principal User:mallory --deny-host 10.0.0.7 --operation All --topic '*'
    ketch acl add --allow-principal User:etl --operation Write --topic logs- \\
        --resource-pattern-type prefixed
    ketch acl list [--topic orders] [--principal User:alice] [--resource-pattern-type match]
    ketch acl remove --allow-principal User:alice --operation Read --topic orders
    ketch acl remove --topic orders          # every ACL of the topic

add     one ACL for every resource x principal x host x operation: `--allow-principal` with
        `--allow-host` (default `*`) gives ALLOW entries, `--deny-principal` with `--deny-host`
        DENY entries. Resources: `--topic`, `--group`, `--transactional-id` (each repeatable)
        and `--cluster`; `--resource-pattern-type` literal (the default) or prefixed.
        Operations by Kafka's names in any case (Read, Write, Create, Delete, Alter, Describe,
        ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, All).
list    the ACLs of the cluster grouped by resource, as kafka-acls prints them; filtered by the
        resources given (pattern type `any` by default; `match` lists what applies to a name)
        and `--principal`.
remove  every ACL that matches: with principals given, exactly the entries `add` would have
        made (operation All without `--operation`: every operation); without, every ACL of the
        resources given.

The command proves the cluster credential (`--secret-file`, else `<data-dir>/cluster.secret`,
node/process.py's `read_secret`) on the brokers' native listener, so the cluster treats it as a
super user: no ACL is needed to manage ACLs. CreateAcls and DeleteAcls go through the bootstrap
broker to the controller; `list` is answered by the bootstrap broker, whose ACLs follow the
controller's within one UpdateMetadata. Exit 0 when everything was done, 1 when the cluster
refused something (each named with its error), 2 for bad flags.

Each command runs on its own event loop (cli/common.py); no state outlives it.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

from actors.acl.bindings import (
    CLUSTER_NAME,
    WILDCARD_HOST,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from cli.bootstrap import DEFAULT_DATA_DIR
from cli.client_tls import client_transport
from cli.common import (
    CLI_CLIENT_CONFIG,
    CLI_REACH_TIMEOUT_MS,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    BootstrapServers,
    SubParsers,
    add_bootstrap_flag,
    error,
    run_argv,
    run_async,
    set_command,
)
from client.client import Client
from node.process import read_secret
from runtime.clock import SystemClock
from runtime.config import ConfigError
from wire.errors import ErrorCode
from wire.messages import (
    AclCreation,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsFilter,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)

PROG: Final = "ketch acl"
PATTERN_TYPES: Final = {p.name.lower(): p for p in PatternType if p is not PatternType.UNKNOWN}
_OPERATIONS: Final = {
    op.name.replace("_", "").lower(): op
    for op in AclOperation
    if op not in (AclOperation.UNKNOWN, AclOperation.ANY)
}

Resource = tuple[ResourceType, str]
Entry = tuple[str, str, AclPermissionType]  # principal, host, permission
Work = Callable[[Client], Awaitable[int]]


_EXAMPLES: Final = {
    "add": (
        "examples:\n"
        "  ketch acl add --allow-principal User:alice --operation Write --topic orders\n"
        "  ketch acl add --allow-principal User:bob --operation Read \\\n"
        "      --topic orders --group billing\n"
        "  ketch acl add --allow-principal User:etl --operation All --topic logs- \\\n"
        "      --resource-pattern-type prefixed\n"
        "  ketch acl add --deny-principal User:eve --deny-host 10.0.0.7 \\\n"
        "      --operation All --topic '*'\n"
    ),
    "list": (
        "examples:\n"
        "  ketch acl list\n"
        "  ketch acl list --topic orders --principal User:bob\n"
        "  ketch acl list --topic orders-eu --resource-pattern-type match\n"
    ),
    "remove": (
        "examples:\n"
        "  ketch acl remove --allow-principal User:bob --operation Read --topic orders\n"
        "  ketch acl remove --topic orders\n"
    ),
}


def operation_arg(text: str) -> AclOperation:
    """Kafka's operation names (`Read`, `IdempotentWrite`), any case, `_` or not."""
    op = _OPERATIONS.get(text.replace("_", "").replace("-", "").lower())
    if op is None:
        choices = ", ".join(sorted(o.name for o in _OPERATIONS.values()))
        raise argparse.ArgumentTypeError(f"unknown operation {text!r} (one of {choices})")
    return op


def register(subparsers: SubParsers[argparse.ArgumentParser]) -> None:
    acl = subparsers.add_parser(
        "acl",
        help="add, list and remove ACLs (kafka-acls)",
        description="ACLs of the Kafka listener, with kafka-acls' options (the cluster secret).",
        epilog=_EXAMPLES["add"] + _EXAMPLES["list"].split("\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = acl.add_subparsers(dest="acl_command", required=True, metavar="ACTION")
    for name, help_text, command, default_pattern in (
        ("add", "add ACLs", cmd_add, "literal"),
        ("list", "list ACLs", cmd_list, "any"),
        ("remove", "remove ACLs", cmd_remove, "literal"),
    ):
        parser = actions.add_parser(
            name,
            help=help_text,
            epilog=_EXAMPLES[name],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        _add_flags(parser, listing=name == "list", default_pattern=default_pattern)
        set_command(parser, command)


def _add_flags(parser: argparse.ArgumentParser, *, listing: bool, default_pattern: str) -> None:
    for flag, what in (
        ("--topic", "a topic (repeatable; `*`: every topic)"),
        ("--group", "a consumer group (repeatable)"),
        ("--transactional-id", "a transactional id (repeatable)"),
    ):
        parser.add_argument(flag, action="append", default=[], metavar="NAME", help=what)
    parser.add_argument("--cluster", action="store_true", help="the cluster resource")
    parser.add_argument(
        "--resource-pattern-type",
        choices=sorted(PATTERN_TYPES) if listing else ["literal", "prefixed"],
        default=default_pattern,
        help=f"how the resource names match (default: {default_pattern})",
    )
    if listing:
        parser.add_argument("--principal", default=None, help="only this principal's ACLs")
    else:
        for flag, what in (
            ("--allow-principal", "a principal (User:NAME) the ACLs allow (repeatable)"),
            ("--deny-principal", "a principal the ACLs deny (repeatable)"),
            ("--allow-host", "a host (IP) the allow ACLs are for (repeatable; default *)"),
            ("--deny-host", "a host the deny ACLs are for (repeatable; default *)"),
        ):
            parser.add_argument(flag, action="append", default=[], help=what)
        parser.add_argument(
            "--operation",
            action="append",
            type=operation_arg,
            default=[],
            help="an operation (repeatable): Read, Write, Describe, All, ...",
        )
    parser.add_argument(
        "--secret-file",
        type=Path,
        default=None,
        help="the cluster secret (default: <data-dir>/cluster.secret)",
    )
    parser.add_argument(
        "--data-dir", type=Path, default=None, help=f"a `ketch up` data dir ({DEFAULT_DATA_DIR})"
    )
    add_bootstrap_flag(parser)


def _resources(args: argparse.Namespace) -> list[Resource]:
    resources = [(ResourceType.TOPIC, t) for t in args.topic]
    resources += [(ResourceType.GROUP, g) for g in args.group]
    resources += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        resources.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return resources


def _entries(args: argparse.Namespace) -> Iterator[Entry]:
    for principals, hosts, permission in (
        (args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
        (args.deny_principal, args.deny_host, AclPermissionType.DENY),
    ):
        for principal in principals:
            for host in hosts or [WILDCARD_HOST]:
                yield principal, host, permission


def _usage(message: str) -> int:
    error(PROG, message)
    return EXIT_USAGE


def _secret(args: argparse.Namespace) -> bytes:
    data_dir = args.data_dir if args.data_dir is not None else DEFAULT_DATA_DIR
    _, secret = read_secret(args.secret_file, data_dir)
    return secret


@asynccontextmanager
async def _admin_client(bootstrap: BootstrapServers, secret: bytes) -> AsyncIterator[Client]:
    # The cluster credential makes this connection a cluster member: a super user.
    client = Client(
        bootstrap,
        transport=client_transport(),
        clock=SystemClock(),
        client_id="ketch-acl",
        config=CLI_CLIENT_CONFIG,
        reach_timeout_ms=CLI_REACH_TIMEOUT_MS,
        credential=secret,
    )
    try:
        yield client
    finally:
        await client.close()


def _run(args: argparse.Namespace, work: Work) -> int:
    try:
        secret = _secret(args)
    except ConfigError as exc:
        error(PROG, str(exc))
        return EXIT_FAILED

    async def go() -> int:
        async with _admin_client(args.bootstrap, secret) as client:
            return await work(client)

    return run_async(PROG, args.bootstrap, go)


def cmd_add(args: argparse.Namespace) -> int:
    resources, entries = _resources(args), list(_entries(args))
    if not resources or not entries or not args.operation:
        return _usage("give a resource, a principal (--allow/--deny-principal) and --operation")
    pattern = PATTERN_TYPES[args.resource_pattern_type]
    creations = [
        AclCreation(
            resource_type=kind,
            resource_name=name,
            resource_pattern_type=pattern,
            principal=principal,
            host=host,
            operation=op,
            permission_type=permission,
        )
        for kind, name in resources
        for principal, host, permission in entries
        for op in args.operation
    ]

    async def work(client: Client) -> int:
        response = await client.send_any(CreateAclsRequest(creations=creations))
        assert isinstance(response, CreateAclsResponse), response
        failed = 0
        for creation, result in zip(creations, response.results, strict=True):
            text = _describe_creation(creation)
            if result.error_code == ErrorCode.NONE:
                print(f"added {text}")
            else:
                failed += 1
                said = f": {result.error_message}" if result.error_message else ""
                error(PROG, f"cannot add {text}: {ErrorCode(result.error_code).name}{said}")
        return EXIT_FAILED if failed else EXIT_OK

    return _run(args, work)


def cmd_remove(args: argparse.Namespace) -> int:
    resources, entries = _resources(args), list(_entries(args))
    if not resources:
        return _usage("give a resource (--topic, --group, --transactional-id, --cluster)")
    pattern = PATTERN_TYPES[args.resource_pattern_type]
    operations = args.operation or [AclOperation.ANY]
    # Without principals: every entry of the resources.
    matching: list[tuple[str | None, str | None, AclPermissionType]] = [*entries] or [
        (None, None, AclPermissionType.ANY)
    ]
    filters = [
        DeleteAclsFilter(
            resource_type_filter=kind,
            resource_name_filter=name,
            pattern_type_filter=pattern,
            principal_filter=principal,
            host_filter=host,
            operation=op,
            permission_type=permission,
        )
        for kind, name in resources
        for principal, host, permission in matching
        for op in operations
    ]

    async def work(client: Client) -> int:
        response = await client.send_any(DeleteAclsRequest(filters=filters))
        assert isinstance(response, DeleteAclsResponse), response
        failed = 0
        for result in response.filter_results:
            if result.error_code != ErrorCode.NONE:
                failed += 1
                said = f": {result.error_message}" if result.error_message else ""
                error(PROG, f"cannot remove: {ErrorCode(result.error_code).name}{said}")
            for acl in result.matching_acls:
                print(
                    "removed "
                    + _binding_text(
                        acl.resource_type,
                        acl.resource_name,
                        acl.pattern_type,
                        acl.principal,
                        acl.host,
                        acl.operation,
                        acl.permission_type,
                    )
                )
        return EXIT_FAILED if failed else EXIT_OK

    return _run(args, work)


def cmd_list(args: argparse.Namespace) -> int:
    pattern = PATTERN_TYPES[args.resource_pattern_type]
    requests = [
        DescribeAclsRequest(
            resource_type_filter=kind,
            resource_name_filter=name,
            pattern_type_filter=pattern,
            principal_filter=args.principal,
        )
        for kind, name in _resources(args)
    ] or [DescribeAclsRequest(pattern_type_filter=pattern, principal_filter=args.principal)]

    async def work(client: Client) -> int:
        for request in requests:
            response = await client.send_any(request)
            assert isinstance(response, DescribeAclsResponse), response
            if response.error_code != ErrorCode.NONE:
                said = f": {response.error_message}" if response.error_message else ""
                error(PROG, f"cannot list ACLs: {ErrorCode(response.error_code).name}{said}")
                return EXIT_FAILED
            for resource in response.resources:
                print(
                    f"Current ACLs for resource `ResourcePattern(resourceType="
                    f"{ResourceType(resource.resource_type).name}, name={resource.resource_name}"
                    f", patternType={PatternType(resource.pattern_type).name})`:"
                )
                for acl in resource.acls:
                    print(
                        f"\t(principal={acl.principal}, host={acl.host}, operation="
                        f"{AclOperation(acl.operation).name}, permissionType="
                        f"{AclPermissionType(acl.permission_type).name})"
                    )
                print()
        return EXIT_OK

    return _run(args, work)


def _describe_creation(c: AclCreation) -> str:
    return _binding_text(
        c.resource_type,
        c.resource_name,
        c.resource_pattern_type,
        c.principal,
        c.host,
        c.operation,
        c.permission_type,
    )


def _binding_text(
    kind: int, name: str, pattern: int, principal: str, host: str, op: int, permission: int
) -> str:
    return (
        f"{AclPermissionType(permission).name} {principal} from {host}: "
        f"{AclOperation(op).name} on {ResourceType(kind).name} {name!r} "
        f"({PatternType(pattern).name})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """The command without cli/main.py (tests run it so)."""
    return run_argv("ketch", register, [] if argv is None else argv)
