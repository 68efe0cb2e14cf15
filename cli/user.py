"""`ketch user create|delete|list`: SCRAM users for SASL on the Kafka listener (kafka-configs'
`--alter --add-config 'SCRAM-SHA-256=[...]' --entity-type users`).

    ketch user create alice --mechanism SCRAM-SHA-256                  # asks for the password
    ketch user create alice --mechanism SCRAM-SHA-512 --iterations 8192 --password-file pw.txt
    ketch user delete alice [--mechanism SCRAM-SHA-256]                # default: every one
    ketch user list

create  computes a random salt and the salted password here, as kafka-configs does
        (runtime/net/scram.py: PBKDF2 of the password, `--iterations`, default 4096, at least
        4096), and sends them in AlterUserScramCredentials; the controller keeps only what a
        server needs (StoredKey, ServerKey), never the password. `--mechanism` is repeatable.
        The password comes from the first line of `--password-file`, else from a prompt that
        does not echo. Brokers refuse the request over a connection without TLS unless it
        comes from their own host (node/broker/scram_credentials.py).
delete  removes the user's credential for each mechanism given (without one: every mechanism
        the user has).
list    every user with its mechanisms and iterations (DescribeUserScramCredentials).

The requests go through the bootstrap broker's native listener (AlterUserScramCredentials is
forwarded to the controller; DescribeUserScramCredentials is answered by the broker, whose
credentials follow the controller's within one UpdateMetadata). Exit 0 when everything was done,
1 when the cluster refused something (each named with its error), 2 for bad flags.

Each command runs on its own event loop (cli/common.py); no state outlives it.
"""

from __future__ import annotations

import argparse
import getpass
import secrets
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Final

from cli.admin_login import add_cluster_secret_flags, cluster_secret
from cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    SubParsers,
    add_bootstrap_flag,
    error,
    open_client,
    run_argv,
    run_async,
    set_command,
)
from client.client import Client
from runtime.net.scram import (
    DEFAULT_ITERATIONS,
    MECHANISMS,
    MECHANISMS_BY_TYPE,
    MIN_ITERATIONS,
    SALT_BYTES,
    ScramMechanism,
    salted_password,
)
from wire.errors import ErrorCode
from wire.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
    UserName,
)

PROG: Final = "ketch user"


def mechanism_arg(text: str) -> ScramMechanism:
    mechanism = MECHANISMS.get(text.strip().upper())
    if mechanism is None:
        raise argparse.ArgumentTypeError(
            f"unknown mechanism {text!r} (one of {', '.join(MECHANISMS)})"
        )
    return mechanism


def register(subparsers: SubParsers[argparse.ArgumentParser]) -> None:
    user = subparsers.add_parser(
        "user",
        help="create, delete and list SCRAM users (SASL)",
        description=__doc__.split("\n\n", 1)[0] if __doc__ else None,
        epilog=(
            "examples:\n"
            "  ketch user create alice --mechanism SCRAM-SHA-256\n"
            "  ketch user list\n"
            "  ketch user delete alice\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = user.add_subparsers(dest="user_command", required=True, metavar="ACTION")
    create = actions.add_parser(
        "create",
        help="add or replace a user's SCRAM credential",
        epilog=(
            "examples:\n"
            "  ketch user create alice --mechanism SCRAM-SHA-256    # asks the password\n"
            "  ketch user create bob --mechanism SCRAM-SHA-512 \\\n"
            "      --iterations 8192 --password-file bob.pw\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    create.add_argument("name", metavar="NAME")
    create.add_argument(
        "--mechanism", type=mechanism_arg, action="append", required=True, help="repeatable"
    )
    create.add_argument(
        "--iterations",
        type=int,
        default=DEFAULT_ITERATIONS,
        help=f"PBKDF2 iterations (default {DEFAULT_ITERATIONS}, at least {MIN_ITERATIONS})",
    )
    create.add_argument(
        "--password-file", type=Path, default=None, help="read the password from this file"
    )
    add_bootstrap_flag(create)
    add_cluster_secret_flags(create)
    set_command(create, cmd_create)
    delete = actions.add_parser(
        "delete",
        help="remove a user's SCRAM credentials",
        epilog=(
            "examples:\n"
            "  ketch user delete alice                 # every mechanism\n"
            "  ketch user delete bob --mechanism SCRAM-SHA-512\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    delete.add_argument("name", metavar="NAME")
    delete.add_argument(
        "--mechanism", type=mechanism_arg, action="append", default=[], help="repeatable"
    )
    add_bootstrap_flag(delete)
    add_cluster_secret_flags(delete)
    set_command(delete, cmd_delete)
    listing = actions.add_parser(
        "list",
        help="users, their mechanisms and iterations",
        epilog="examples:\n  ketch user list\n  ketch user list --bootstrap broker-0:9092\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_bootstrap_flag(listing)
    add_cluster_secret_flags(listing)
    set_command(listing, cmd_list)


def _client(args: argparse.Namespace) -> AbstractAsyncContextManager[Client]:
    """A client that proves the cluster secret when it can (cli/admin_login.py)."""
    return open_client(args.bootstrap, client_id="ketch-user", credential=cluster_secret(args))


def read_password(path: Path | None) -> str:
    """The first line of `path`, else a prompt without echo; ValueError when empty."""
    if path is not None:
        lines = path.read_text(encoding="utf-8").splitlines()
        password = lines[0] if lines else ""
    else:
        password = getpass.getpass("Password: ")
    if not password:
        raise ValueError("the password is empty")
    return password


def upsertions(
    name: str, mechanisms: list[ScramMechanism], password: str, iterations: int
) -> list[ScramCredentialUpsertion]:
    """One upsertion per mechanism, each with its own random salt (as kafka-configs)."""
    result = []
    for mechanism in dict.fromkeys(mechanisms):
        salt = secrets.token_bytes(SALT_BYTES)
        result.append(
            ScramCredentialUpsertion(
                name=name,
                mechanism=mechanism.type_code,
                iterations=iterations,
                salt=salt,
                salted_password=salted_password(mechanism, password.encode(), salt, iterations),
            )
        )
    return result


def _report(response: AlterUserScramCredentialsResponse, done: str) -> int:
    failed = 0
    for result in response.results:
        if result.error_code == ErrorCode.NONE:
            print(f"{done} {result.user}")
        else:
            failed += 1
            said = f": {result.error_message}" if result.error_message else ""
            error(PROG, f"{result.user}: {ErrorCode(result.error_code).name}{said}")
    return EXIT_FAILED if failed else EXIT_OK


def cmd_create(args: argparse.Namespace) -> int:
    if args.iterations < MIN_ITERATIONS:
        error(PROG, f"--iterations must be at least {MIN_ITERATIONS}")
        return EXIT_USAGE
    try:
        password = read_password(args.password_file)
    except (OSError, ValueError) as exc:
        error(PROG, str(exc))
        return EXIT_USAGE
    request = AlterUserScramCredentialsRequest(
        upsertions=upsertions(args.name, args.mechanism, password, args.iterations)
    )

    async def work() -> int:
        async with _client(args) as client:
            response = await client.send_any(request)
        assert isinstance(response, AlterUserScramCredentialsResponse), response
        return _report(response, "created")

    return run_async(PROG, args.bootstrap, work)


def cmd_delete(args: argparse.Namespace) -> int:
    async def work() -> int:
        async with _client(args) as client:
            mechanisms = [m.type_code for m in dict.fromkeys(args.mechanism)]
            if not mechanisms:
                described = await client.send_any(
                    DescribeUserScramCredentialsRequest(users=[UserName(name=args.name)])
                )
                assert isinstance(described, DescribeUserScramCredentialsResponse)
                [result] = described.results
                if result.error_code != ErrorCode.NONE:
                    error(PROG, f"{args.name}: {result.error_message}")
                    return EXIT_FAILED
                mechanisms = [info.mechanism for info in result.credential_infos]
            request = AlterUserScramCredentialsRequest(
                deletions=[ScramCredentialDeletion(name=args.name, mechanism=m) for m in mechanisms]
            )
            response = await client.send_any(request)
        assert isinstance(response, AlterUserScramCredentialsResponse), response
        return _report(response, "deleted")

    return run_async(PROG, args.bootstrap, work)


def cmd_list(args: argparse.Namespace) -> int:
    async def work() -> int:
        async with _client(args) as client:
            response = await client.send_any(DescribeUserScramCredentialsRequest(users=None))
        assert isinstance(response, DescribeUserScramCredentialsResponse), response
        rows = [
            (result.user, MECHANISMS_BY_TYPE[info.mechanism].name, str(info.iterations))
            for result in response.results
            for info in result.credential_infos
            if info.mechanism in MECHANISMS_BY_TYPE
        ]
        header = ("USER", "MECHANISM", "ITERATIONS")
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(3)]
        for row in [header, *rows]:
            print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
        return EXIT_OK

    return run_async(PROG, args.bootstrap, work)


def main(argv: list[str]) -> int:
    """`ketch user ARGV` without cli/main.py (the exit code)."""
    return run_argv(PROG, register, ["user", *argv])
