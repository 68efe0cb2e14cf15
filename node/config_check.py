"""The configuration check every node runs before anything starts: each property's name, type
and range, with one message per problem naming where it came from, the key, the value and why.

    ketch.toml: "min.insync.replicas" = "abc": not an integer
    ketch.toml: "min.insync.replicas" = 0: must be >= 1
    --set min.insync.replicas=abc: not an integer
    ketch.toml: "replica.lag.time.max" = 10000: unknown property (did you mean
        "replica.lag.time.max.ms"?)
    ketch.toml: "group.max.session.timeout.ms" = 8000, "group.min.session.timeout.ms" = 9000:
        group.min.session.timeout.ms must not exceed group.max.session.timeout.ms

Names. One TOML file configures every node of a cluster (`ketch up --config`), so a name is
known when any node reads it (`known_properties()`: the brokers' names and the controller's):
a broker accepts the controller's metadata.snapshot.records, the controller the brokers'
replica.lag.time.max.ms, and each checks the values of its own. A name no node reads is a
problem, with the closest known name.

Values. There is one validation, the components' own: `check` builds each role's configuration
from the explicit properties with the same functions the node runs at start
(`BrokerConfig.from_properties`, `controller_configs`); a type is the dataclass field's
(runtime/properties.py), a range is the component's `__post_init__`. When the build fails, the
properties at fault are found by building again from fewer of them: the smallest set that still
fails (removing any one of its keys makes it pass) is one problem, usually a single key, or keys
that are only wrong together; the search repeats on the rest until the rest builds, so every
bad property is reported at once, not the first only. The reason is the component's message,
without the key and the value the problem already names.

Pure functions of their arguments. A build takes well under a millisecond; a configuration
without problems costs one per role, each problem about one per explicit key more.
"""

from __future__ import annotations

import contextlib
import enum
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from node.broker import config as broker_config
from node.controller import config as controller_config
from runtime.config import (
    ConfigError,
    EffectiveConfig,
    Setting,
    Source,
    Value,
    toml_key,
    toml_value,
)
from runtime.properties import PropertyValueError

Build = Callable[[Mapping[str, Value]], object]


class Role(enum.Enum):
    BROKER = "broker"
    CONTROLLER = "controller"


def _build_broker(properties: Mapping[str, Value]) -> object:
    # broker.id is required and comes from `--id`; any id checks the rest.
    return broker_config.BrokerConfig.from_properties({"broker.id": 0, **properties})


_BUILDS: Final[Mapping[Role, Build]] = {
    Role.BROKER: _build_broker,
    Role.CONTROLLER: controller_config.controller_configs,
}


def known_properties() -> frozenset[str]:
    """Every name some node reads: the names a shared config file may hold."""
    return broker_config.known_properties() | controller_config.known_properties()


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One problem: the explicit settings at fault (one, or several wrong only together), why,
    and the config file they may come from."""

    settings: tuple[Setting, ...]
    reason: str
    file: Path | None = None

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(setting.key for setting in self.settings)

    def __str__(self) -> str:
        return f"{self.where()}: {self.reason}"

    def where(self) -> str:
        """The settings as their source spells them: `file: "key" = value` for the file's,
        `--set key=value` for a flag's."""
        parts = []
        from_file = [s for s in self.settings if s.source is Source.FILE]
        if from_file:
            assignments = ", ".join(f"{toml_key(s.key)} = {toml_value(s.value)}" for s in from_file)
            parts.append(f"{self.file}: {assignments}")
        parts.extend(
            f"--set {s.key}={_flag_text(s.value)}" for s in self.settings if s.source is Source.FLAG
        )
        return " and ".join(parts) or "the defaults"


class ConfigProblems(ConfigError):
    """A configuration with problems; the text is one line per problem."""

    def __init__(self, problems: Sequence[ConfigProblem]) -> None:
        assert problems
        super().__init__("\n".join(str(problem) for problem in problems))
        self.problems = tuple(problems)


def check(
    effective: EffectiveConfig,
    roles: Iterable[Role],
    *,
    known: frozenset[str] | None = None,
) -> list[ConfigProblem]:
    """The problems of `effective` for nodes of `roles`: names no node reads (`known`, by
    default every node's names), then values a node of a role refuses. Empty: it is usable."""
    names = known_properties() if known is None else known
    problems = [
        ConfigProblem((effective.settings[key],), _unknown_reason(close), effective.file)
        for key, close in effective.unknown_keys(names)
    ]
    candidates = {
        key: setting
        for key, setting in effective.settings.items()
        if setting.source is not Source.DEFAULT and key in names
    }
    found: dict[tuple[str, ...], ConfigProblem] = {}
    for role in roles:
        for problem in _value_problems(_BUILDS[role], candidates, effective.file):
            # A key both roles read (num.partitions, the session timeouts) is reported once.
            found.setdefault(problem.keys, problem)
    return problems + [found[keys] for keys in sorted(found)]


def raise_problems(effective: EffectiveConfig, roles: Iterable[Role]) -> None:
    """`check`, raising ConfigProblems when there is any."""
    problems = check(effective, roles)
    if problems:
        raise ConfigProblems(problems)


def _unknown_reason(close: str | None) -> str:
    return "unknown property" + (f" (did you mean {toml_key(close)}?)" if close else "")


def _value_problems(
    build: Build, settings: Mapping[str, Setting], file: Path | None
) -> list[ConfigProblem]:
    problems = []
    remaining = dict(settings)
    # Each round removes at least one key, so the loop ends.
    while (error := _build_error(build, remaining)) is not None:
        at_fault = _smallest_failing(build, remaining)
        if not at_fault:
            # Not one explicit key: the defaults alone fail, a bug of the component's defaults.
            problems.append(ConfigProblem((), str(error), file))
            break
        faulty = tuple(remaining[key] for key in at_fault)
        error = _build_error(build, {key: remaining[key] for key in at_fault})
        assert error is not None, at_fault  # _smallest_failing keeps only failing sets
        problems.append(ConfigProblem(faulty, _reason(error, faulty), file))
        for key in at_fault:
            del remaining[key]
    return problems


def _build_error(build: Build, settings: Mapping[str, Setting]) -> ValueError | None:
    try:
        build({key: setting.value for key, setting in settings.items()})
    except ValueError as exc:
        return exc
    return None


def _smallest_failing(build: Build, settings: Mapping[str, Setting]) -> list[str]:
    """A subset of `settings` that fails to build and passes without any one of its keys
    (delta debugging's one-minimal set), found by dropping the keys one at a time."""
    kept = sorted(settings)
    for key in sorted(settings):
        fewer = [k for k in kept if k != key]
        if _build_error(build, {k: settings[k] for k in fewer}) is not None:
            kept = fewer
    return kept


def _reason(error: ValueError, faulty: Sequence[Setting]) -> str:
    """Why, in the component's words, without what the problem's `where()` already says."""
    if len(faulty) != 1:
        return str(error)
    setting = faulty[0]
    if isinstance(error, PropertyValueError) and error.key == setting.key:
        return error.reason
    return _strip_value(_strip_name(str(error), setting.key), setting.value)


def _strip_name(text: str, key: str) -> str:
    """`text` without a leading property name: the key, its field name (dots as underscores),
    or its topic-level form (log.segment.bytes is checked as segment.bytes)."""
    parts = key.split(".")
    names = {key, key.replace(".", "_")}
    names.update(".".join(parts[i:]) for i in range(1, len(parts) - 1))
    for name in sorted(names, key=len, reverse=True):
        for separator in (": ", " "):
            if text.startswith(name + separator):
                return text[len(name) + len(separator) :]
    return text


_TRAILING_VALUE: Final = re.compile(r"(?::|, got) (?P<value>'[^']*'|\"[^\"]*\"|\S+)$")


def _strip_value(text: str, value: Value) -> str:
    """`text` without a trailing `: value` or `, got value` naming the problem's own value."""
    match = _TRAILING_VALUE.search(text)
    if match is None:
        return text
    shown = match.group("value").strip("'\"")
    if shown not in _spellings(value):
        return text
    return text[: match.start()]


def _spellings(value: Value) -> set[str]:
    """How a component may print `value` after reading it (text, int, float)."""
    text = str(value).strip()
    spellings = {text, str(value)}
    for parse in (int, float):
        with contextlib.suppress(ValueError):
            spellings.add(str(parse(text)))
    return spellings


def _flag_text(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
