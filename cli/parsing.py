"""The argparse parser class every `ketch` subcommand uses. Kept apart from cli/common.py (which
imports the client and every wire message) so that `ketch --help`, which builds only the list
of commands, imports nothing but argparse."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any


class CommandParser(argparse.ArgumentParser):
    """The parser of each subcommand (and, inherited, of theirs): an argument it does not know is
    its own usage error. argparse hands a subcommand's leftovers up to the top-level parser,
    which then printed `ketch`'s usage for `ketch consume t --bogus` instead of consume's."""

    def parse_known_args(  # type: ignore[override]  # one signature for typeshed's overloads
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras
