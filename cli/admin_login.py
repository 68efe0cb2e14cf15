"""How an admin command (`ketch user`, `ketch quota`) proves it may administer the cluster.

With an authorizer on, those APIs need Alter/AlterConfigs on the cluster, and a fresh cluster has
no user who holds them: Kafka bootstraps its first SCRAM users at format time or through a
super user. `ketch` commands on the cluster's host have the cluster secret, so, as `ketch acl`
does, they prove the cluster credential and are super users: from `--secret-file`, else from
`<data-dir>/cluster.secret` when that file exists (`--data-dir`, default ./data, the `ketch up`
layout). A command given a SASL login in `--command-config` acts as that user instead, and one
with neither goes as `User:ANONYMOUS`, as before.

Pure functions of the parsed arguments and the files they name.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cli.bootstrap import DEFAULT_DATA_DIR
from cli.client_sasl import client_authenticator
from cli.common import CliError


def add_cluster_secret_flags(parser: argparse.ArgumentParser) -> None:
    """`--secret-file FILE` and `--data-dir DIR` (see the module docstring)."""
    parser.add_argument(
        "--secret-file",
        type=Path,
        default=None,
        help="the cluster secret, to act as a super user (default: <data-dir>/cluster.secret "
        "when it exists)",
    )
    parser.add_argument(
        "--data-dir", type=Path, default=None, help=f"a `ketch up` data dir ({DEFAULT_DATA_DIR})"
    )


def cluster_secret(args: argparse.Namespace) -> bytes | None:
    """The cluster secret to prove, or None (a SASL login given, or no secret to be found).

    Raises CliError for a --secret-file that cannot be read or is too short, and for a
    <data-dir>/cluster.secret that exists but is unusable."""
    if client_authenticator() is not None:
        return None  # --command-config logs in as a user: act as that user
    from node.process import SECRET_FILE_NAME, read_secret  # only admin commands pay for it

    data_dir: Path = args.data_dir if args.data_dir is not None else DEFAULT_DATA_DIR
    if args.secret_file is None and not any(
        (d / SECRET_FILE_NAME).exists() for d in (data_dir, data_dir.parent)
    ):
        return None
    try:
        _, secret = read_secret(args.secret_file, data_dir)
    except ValueError as exc:  # runtime.config.ConfigError
        raise CliError(str(exc)) from None
    return secret
