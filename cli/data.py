"""`ketch produce` and `ketch consume`, kcat's two modes: this module registers both commands
(cli/produce.py and cli/consume.py implement them; cli/record_format.py prints records,
cli/data_common.py holds what both share).

    ketch produce TOPIC [-K SEP] [--partition P] [--header K=V]... [--acks 0|1|all]
                        [--compression none|gzip|snappy|lz4|zstd] [--linger-ms MS]
                        [--batch-size B] [--count N] [--rate R] [--size B]
    ketch consume TOPIC [--from-beginning | --offset beginning|end|N|-N | --from-timestamp T]
                        [--format FMT | --json] [-K SEP] [--print-offsets] [--partition P]
                        [--group G] [--max-messages N] [--timeout-ms T]

For a kcat user: -P is `produce` (-K; -p is --partition, -H --header, -z --compression, -c
--count), -C is `consume` (-K; -o is --offset, -f --format, -J --json, -c --max-messages; -e,
exit at the end, is nearest to a short --timeout-ms), -G is `consume --group`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from cli import consume, produce
from cli.common import SubParsers, run_argv


def register(subparsers: SubParsers[argparse.ArgumentParser]) -> None:
    produce.register(subparsers)
    consume.register(subparsers)


def main(argv: Sequence[str]) -> int:
    """`ketch produce|consume ...` without cli/main.py: `main(["consume", "t"])`."""
    return run_argv("ketch", register, argv)
