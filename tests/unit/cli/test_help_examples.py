"""Every `ketch` subcommand's help ends with examples that its own parser accepts (issue 23:
"`ketch --help` and every subcommand's help list examples"); the top-level `ketch --help` is
not covered here.

The parsers are the ones `ketch` runs: every argparse command and its actions as cli/main.py's
`build_parser()` registers them (each module's `register`, into a fresh `ketch` parser), and the
pass-throughs (`broker`, `controller`, `verify`, `compact`) as their modules' `build_parser()`
give them (`ketch broker --help` is that parser's help). So a command added to `ketch` without
examples fails here too. In each parser's `format_help()` the indented lines under its
"examples:" heading are command lines (a trailing backslash continues one). Each is split as a
shell would (shlex): of a pipeline only the last command counts, and from a `>`, `||`, `&&` or
`;` on, the line is shell, not `ketch`. What is left must start with the parser's own words
(`ketch topic create`) and the rest must parse, so an example with a flag the command lacks, or
a value its `type=` refuses, fails here, naming the command and the line.
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Callable, Iterator
from typing import Final, cast

import pytest

import node.broker.main as broker_main
import node.controller.main as controller_main
import offline.compact as offline_compact
import offline.verify as offline_verify
from cli import main as ketch_main

PASS_THROUGH_PARSERS: Final[tuple[Callable[[], argparse.ArgumentParser], ...]] = (
    broker_main.build_parser,
    controller_main.build_parser,
    offline_verify.build_parser,
    offline_compact.build_parser,
)
MAX_COLUMNS: Final = 79  # "under 80 columns"
HEADING: Final = re.compile(r"examples( \(.+\))?:")
# Shell syntax after which the rest of the line is not part of the `ketch` command.
SHELL_ENDS: Final = frozenset({">", ">>", "<", "||", "&&", ";", "&"})
NUMBER: Final = re.compile(r"-\d+")  # a negative value (`--shift-by -10`), not a flag


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """Every parser below `parser`, depth first (`topic`, then `topic create`, ...)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in cast("dict[str, argparse.ArgumentParser]", action.choices).values():
                yield sub
                yield from _subparsers(sub)


def _all_parsers() -> dict[str, argparse.ArgumentParser]:
    """Every subcommand's parser by its prog ("ketch topic create")."""
    # node_flags=False: the pass-throughs are listed there with empty parsers; theirs replace
    # them below (one that is not in PASS_THROUGH_PARSERS keeps its empty one, and fails).
    found = {p.prog: p for p in _subparsers(ketch_main.build_parser(node_flags=False))}
    for build in PASS_THROUGH_PARSERS:
        parser = build()
        assert parser.prog in found, f"{parser.prog} is no longer a `ketch` command"
        found[parser.prog] = parser
    return found


PARSERS: Final = _all_parsers()


def example_section(help_text: str) -> list[str]:
    """The lines of the examples section: its heading and the indented lines under it."""
    lines = help_text.splitlines()
    starts = [i for i, line in enumerate(lines) if HEADING.fullmatch(line)]
    assert len(starts) == 1, f"want one 'examples:' heading, found {len(starts)}"
    section = [lines[starts[0]]]
    for line in lines[starts[0] + 1 :]:
        if not line.startswith("  "):
            break  # a blank line or the next paragraph ends it
        section.append(line)
    return section


def example_commands(section: list[str]) -> list[str]:
    """The command lines of a section (its lines after the heading), continuations joined."""
    commands: list[str] = []
    pending = ""
    for line in section[1:]:
        text = pending + line.strip()
        if text.endswith("\\"):
            pending = text[:-1]
            continue
        commands.append(text)
        pending = ""
    assert not pending, f"the last example ends in a backslash: {pending!r}"
    return commands


def ketch_words(line: str) -> list[str]:
    """The words of the `ketch` command on a shell line: the last command of a pipeline, up to
    the first redirection or list operator; comments dropped."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = list(lexer)
    if "|" in words:
        words = words[len(words) - words[::-1].index("|") :]
    for i, word in enumerate(words):
        if word in SHELL_ENDS:
            return words[:i]
    return words


def abbreviated_flags(words: list[str]) -> list[str]:
    """The flags in `words` (a whole `ketch ...` command) not spelled as the parser spells them.

    argparse takes any unambiguous prefix (`--partition` for `--partitions`), so such an example
    parses today and breaks the day a flag that shares the prefix is added."""
    # The command's own parser: the longest `ketch ...` prog that the words start with.
    prog = max((p for p in PARSERS if words[: len(p.split())] == p.split()), key=len)
    known = PARSERS[prog]._option_string_actions
    flags = (w.partition("=")[0] for w in words if w.startswith("-") and not NUMBER.fullmatch(w))
    return [flag for flag in flags if flag not in known]


def _parse_failure(parser: argparse.ArgumentParser, words: list[str]) -> str | None:
    """Why `parser` refuses `words`, or None when it accepts them."""
    try:
        parser.parse_args(words)
    except SystemExit as exc:  # argparse's usage error: the message went to stderr
        return f"argparse exited with {exc.code}"
    except Exception as exc:  # ketch verify's parser raises its usage error instead
        return f"{type(exc).__name__}: {exc}"
    return None


@pytest.mark.parametrize("prog", sorted(PARSERS))
def test_examples_parse(prog: str, capsys: pytest.CaptureFixture[str]) -> None:
    parser = PARSERS[prog]
    commands = example_commands(example_section(parser.format_help()))
    assert commands, f"{prog}: an 'examples:' heading with no command under it"
    own_words = prog.split()
    for line in commands:
        words = ketch_words(line)
        assert words[: len(own_words)] == own_words, f"{prog}: not a `{prog}` command: {line}"
        failure = _parse_failure(parser, words[len(own_words) :])
        assert failure is None, f"{prog}: {line}\n  {failure}\n  {capsys.readouterr().err}"
        short = abbreviated_flags(words)
        assert not short, f"{prog}: {line}\n  not a flag as the parser spells it: {short}"


@pytest.mark.parametrize("prog", sorted(PARSERS))
def test_examples_fit_80_columns(prog: str) -> None:
    section = example_section(PARSERS[prog].format_help())
    wide = [line for line in section if len(line) > MAX_COLUMNS]
    assert not wide, f"{prog}: wider than {MAX_COLUMNS} columns: {wide}"


# The checks themselves, on lines that must and must not pass.


def test_pipeline_and_redirection_are_shell() -> None:
    line = "printf 'a:b\\n' | ketch produce t -K :  # a comment"
    assert ketch_words(line) == ["ketch", "produce", "t", "-K", ":"]
    line = "ketch config show --set a=1 > f.toml"
    assert ketch_words(line) == ["ketch", "config", "show", "--set", "a=1"]
    line = "ketch cluster health --json || echo bad"
    assert ketch_words(line) == ["ketch", "cluster", "health", "--json"]


def test_continuation_lines_are_joined() -> None:
    section = ["examples:", "  ketch topic create t \\", "      --partitions 3", "  ketch up"]
    assert example_commands(section) == ["ketch topic create t --partitions 3", "ketch up"]


def test_a_flag_the_parser_lacks_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    create = PARSERS["ketch topic create"]
    assert _parse_failure(create, ["orders", "--partitions", "3"]) is None
    assert _parse_failure(create, ["orders", "--replicas", "3"]) is not None
    assert _parse_failure(create, ["orders", "--partitions", "none"]) is not None
    line = "ketch topic create orders --partition 3 --config=retention.ms=1 --json"
    assert abbreviated_flags(line.split()) == ["--partition", "--json"]
    line = "ketch group reset-offsets --group g --all-topics --shift-by -10"
    assert abbreviated_flags(line.split()) == []
    verify = PARSERS["ketch verify"]  # its parser raises instead of exiting
    assert _parse_failure(verify, ["data", "--bogus"]) is not None
    capsys.readouterr()  # argparse's usage messages


def test_help_without_examples_is_found() -> None:
    with pytest.raises(AssertionError, match="examples"):
        example_section("usage: ketch x\n\noptions:\n  -h, --help  show this help message\n")
