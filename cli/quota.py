"""`ketch quota set|list|remove`: client quotas (kafka-configs' `--entity-type users/clients`).

    ketch quota set --client-id loader --producer-byte-rate 1048576
    ketch quota set --user alice --client-id-default --consumer-byte-rate 2097152
    ketch quota set --user-default --producer-byte-rate 10485760 --consumer-byte-rate 10485760
    ketch quota list [--user alice] [--client-id loader]
    ketch quota remove --client-id loader [--producer-byte-rate] [--consumer-byte-rate]

The entity is `--user NAME` or `--user-default` (every user without its own quota), and/or
`--client-id NAME` or `--client-id-default`; a user and a client id together name the pair.
Quotas are bytes per second per broker, as Kafka's: `producer_byte_rate` counts the record
bytes a client produces, `consumer_byte_rate` the record bytes it is sent (node/broker/quotas.py
has the rules, actors/quota/manager.py which entity applies to a client).

set     AlterClientQuotas with the rates given (at least one), through the bootstrap broker to
        the controller, which checks them (a whole number > 0) and tells every broker.
list    DescribeClientQuotas on the bootstrap broker (its quotas follow the controller's within
        one UpdateMetadata): every entity with a quota, or those of the entity flags given (a
        name matches exactly, a default flag the default; `--user` alone lists alice's quotas
        for any client id too, as kafka-configs does).
remove  AlterClientQuotas removing the rates named (`--producer-byte-rate` /
        `--consumer-byte-rate` without a value), or both when none is named.

Exit 0 when done, 1 when the cluster refused (its error named), 2 for bad flags. Each command runs
on its own event loop (cli/common.py); no state outlives it.
"""

from __future__ import annotations

import argparse
from typing import Final

from actors.quota.entities import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE
from cli.admin_login import add_cluster_secret_flags, cluster_secret
from cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    BootstrapServers,
    SubParsers,
    add_bootstrap_flag,
    error,
    open_client,
    positive_int_arg,
    run_async,
    set_command,
)
from wire.errors import ErrorCode, KafkaError
from wire.messages import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from wire.messages.quotas import (
    ENTITY_CLIENT_ID,
    ENTITY_USER,
    MATCH_DEFAULT,
    MATCH_EXACT,
    AlterClientQuotasEntry,
    ComponentData,
    EntityData,
    OpData,
)

PROG: Final = "ketch quota"
_RATES: Final = (
    (PRODUCER_BYTE_RATE, "--producer-byte-rate"),
    (CONSUMER_BYTE_RATE, "--consumer-byte-rate"),
)


_EXAMPLES: Final = {
    "quota": (
        "ketch quota set --client-id loader --producer-byte-rate 1048576",
        "ketch quota list",
        "ketch quota remove --client-id loader",
    ),
    "set": (
        "ketch quota set --client-id loader --producer-byte-rate 1048576",
        "ketch quota set --user alice --client-id-default --consumer-byte-rate 2097152",
        "ketch quota set --user-default --producer-byte-rate 10485760",
    ),
    "list": (
        "ketch quota list",
        "ketch quota list --user alice",
        "ketch quota list --user-default",
    ),
    "remove": (
        "ketch quota remove --client-id loader",
        "ketch quota remove --user alice --consumer-byte-rate",
    ),
}


def _epilog(name: str) -> str:
    return "examples:\n" + "".join(f"  {line}\n" for line in _EXAMPLES[name])


def register(subparsers: SubParsers[argparse.ArgumentParser]) -> None:
    quota = subparsers.add_parser(
        "quota",
        help="set, list and remove client quotas (byte rates per user / client id)",
        description=__doc__.split("\n\n", 1)[0] if __doc__ else None,
        epilog=_epilog("quota"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = quota.add_subparsers(dest="quota_command", required=True, metavar="ACTION")
    set_parser = _action(actions, "set", "set byte-rate quotas of an entity")
    _entity_flags(set_parser)
    for key, flag in _RATES:
        set_parser.add_argument(
            flag, dest=key, type=positive_int_arg, metavar="BYTES_PER_S", help=f"{key}"
        )
    add_bootstrap_flag(set_parser)
    add_cluster_secret_flags(set_parser)
    set_command(set_parser, cmd_set)

    list_parser = _action(actions, "list", "list client quotas")
    _entity_flags(list_parser)
    add_bootstrap_flag(list_parser)
    add_cluster_secret_flags(list_parser)
    set_command(list_parser, cmd_list)

    remove = _action(actions, "remove", "remove quotas of an entity")
    _entity_flags(remove)
    for key, flag in _RATES:
        remove.add_argument(flag, dest=key, action="store_true", help=f"remove {key}")
    add_bootstrap_flag(remove)
    add_cluster_secret_flags(remove)
    set_command(remove, cmd_remove)


def _action(
    actions: SubParsers[argparse.ArgumentParser], name: str, help_text: str
) -> argparse.ArgumentParser:
    return actions.add_parser(
        name,
        help=help_text,
        description=help_text[0].upper() + help_text[1:] + ".",
        epilog=_epilog(name),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _entity_flags(parser: argparse.ArgumentParser) -> None:
    user = parser.add_mutually_exclusive_group()
    user.add_argument("--user", metavar="NAME", help="a user (the principal's name)")
    user.add_argument("--user-default", action="store_true", help="the default user")
    client = parser.add_mutually_exclusive_group()
    client.add_argument("--client-id", metavar="ID", help="a client id")
    client.add_argument("--client-id-default", action="store_true", help="the default client id")


def entity_of(args: argparse.Namespace) -> list[EntityData]:
    """The entity the flags name (empty: none named)."""
    entity = []
    if args.user is not None or args.user_default:
        entity.append(EntityData(entity_type=ENTITY_USER, entity_name=args.user))
    if args.client_id is not None or args.client_id_default:
        entity.append(EntityData(entity_type=ENTITY_CLIENT_ID, entity_name=args.client_id))
    return entity


def entity_text(entity: list[EntityData]) -> str:
    return ", ".join(
        f"{e.entity_type}={'<default>' if e.entity_name is None else e.entity_name}" for e in entity
    )


def cmd_set(args: argparse.Namespace) -> int:
    entity = entity_of(args)
    ops = [
        OpData(key=key, value=float(getattr(args, key)))
        for key, _ in _RATES
        if getattr(args, key) is not None
    ]
    if not entity or not ops:
        error(PROG, "set: name an entity (--user / --client-id ...) and at least one rate")
        return EXIT_USAGE
    return _alter(args, entity, ops, "set")


def cmd_remove(args: argparse.Namespace) -> int:
    entity = entity_of(args)
    if not entity:
        error(PROG, "remove: name an entity (--user / --client-id ...)")
        return EXIT_USAGE
    keys = [key for key, _ in _RATES if getattr(args, key)] or [key for key, _ in _RATES]
    return _alter(args, entity, [OpData(key=k, remove=True) for k in keys], "removed")


def _alter(args: argparse.Namespace, entity: list[EntityData], ops: list[OpData], verb: str) -> int:
    bootstrap: BootstrapServers = args.bootstrap
    request = AlterClientQuotasRequest(entries=[AlterClientQuotasEntry(entity=entity, ops=ops)])

    async def work() -> int:
        # The cluster secret when it can (cli/admin_login.py): AlterConfigs on the cluster.
        async with open_client(bootstrap, credential=cluster_secret(args)) as client:
            response = await client.send_any(request)
        if not isinstance(response, AlterClientQuotasResponse):
            raise TypeError(f"AlterClientQuotas answered with {type(response).__name__}")
        if response.error_code != ErrorCode.NONE:
            raise KafkaError(response.error_code, "AlterClientQuotas")
        (result,) = response.entries
        if result.error_code != ErrorCode.NONE:
            name = ErrorCode.from_code(result.error_code).name
            error(PROG, f"{entity_text(entity)}: {name}: {result.error_message}")
            return EXIT_FAILED
        changes = ", ".join(k if o.remove else f"{k}={o.value:.0f}" for o in ops for k in [o.key])
        print(f"{verb} {changes} for {entity_text(entity)}")
        return EXIT_OK

    return run_async(PROG, bootstrap, work)


def cmd_list(args: argparse.Namespace) -> int:
    bootstrap: BootstrapServers = args.bootstrap
    components = [
        ComponentData(
            entity_type=e.entity_type,
            match_type=MATCH_DEFAULT if e.entity_name is None else MATCH_EXACT,
            match=e.entity_name,
        )
        for e in entity_of(args)
    ]
    request = DescribeClientQuotasRequest(components=components)

    async def work() -> int:
        async with open_client(bootstrap, credential=cluster_secret(args)) as client:
            response = await client.send_any(request)
        if not isinstance(response, DescribeClientQuotasResponse):
            raise TypeError(f"DescribeClientQuotas answered with {type(response).__name__}")
        if response.error_code != ErrorCode.NONE:
            name = ErrorCode.from_code(response.error_code).name
            error(PROG, f"list: {name}: {response.error_message}")
            return EXIT_FAILED
        for entry in response.entries or []:
            values = ", ".join(f"{v.key}={v.value:.0f}" for v in entry.values)
            print(f"{entity_text(entry.entity)}: {values}")
        return EXIT_OK

    return run_async(PROG, bootstrap, work)
