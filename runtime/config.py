"""A node's configuration: Kafka property names from a TOML file, overridden by flags.

The file holds Kafka's property names as quoted keys (DESIGN.md, "Command line contract"):

    "replica.lag.time.max.ms" = 10000
    "min.insync.replicas" = 2
    "log.dirs" = ["/data/a", "/data/b"]     # a list is Kafka's comma-separated list

An unquoted dotted key (`log.segment.bytes = 1048576`) is TOML for nested tables; it names the
same property, so tables are flattened back to dotted names, and a name given both ways is an
error rather than a silent pick. Values are TOML booleans, integers, floats, strings, or lists of
those (joined with commas, as Kafka writes list properties); dates and tables inside lists mean
nothing to Kafka and are refused.

Precedence, lowest first: defaults (what the caller knows of the components' defaults), the
file, then flags (`--config k=v` overrides and the dedicated flags such as `--id`). Every
effective value remembers its source, so `ketch config show` can print where each came from.

Pure functions and frozen values; nothing here is shared or mutated after construction.
"""

from __future__ import annotations

import difflib
import enum
import json
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

Value = bool | int | float | str


class ConfigError(ValueError):
    """A configuration that cannot be used: a bad file, a bad override, a bad value."""


class Source(enum.Enum):
    DEFAULT = "default"
    FILE = "file"
    FLAG = "flag"


@dataclass(frozen=True, slots=True)
class Setting:
    key: str
    value: Value
    source: Source


@dataclass(frozen=True, slots=True)
class EffectiveConfig:
    """The merged settings by property name, each with where it came from."""

    settings: Mapping[str, Setting]
    file: Path | None = None

    def properties(self) -> dict[str, Value]:
        """The plain property map the components' `from_properties` read."""
        return {key: setting.value for key, setting in self.settings.items()}

    def explicit(self) -> dict[str, Value]:
        """Only what the file and the flags set: what a node hands its components, which apply
        their own defaults. (Passing the defaults through would change meaning where Kafka lets
        a key stand in for an absent one, e.g. log.retention.hours when log.retention.ms is
        unset.)"""
        return {
            key: setting.value
            for key, setting in self.settings.items()
            if setting.source is not Source.DEFAULT
        }

    def source(self, key: str) -> Source | None:
        setting = self.settings.get(key)
        return None if setting is None else setting.source

    def unknown(self, known: Iterable[str]) -> list[str]:
        """Keys from the file or flags that are not in `known`, each with a suggestion when a
        known name is close (a typo otherwise silently leaves the default in force)."""
        messages = []
        for key, close in self.unknown_keys(known):
            hint = f" (did you mean {close!r}?)" if close else ""
            messages.append(f"unknown property {key!r}{hint}")
        return messages

    def unknown_keys(self, known: Iterable[str]) -> list[tuple[str, str | None]]:
        """(key, the closest known name or None) for each key from the file or flags that is
        not in `known`, sorted by key."""
        names = sorted(set(known))
        found = []
        for key in sorted(self.settings):
            if key in names or self.settings[key].source is Source.DEFAULT:
                continue
            close = difflib.get_close_matches(key, names, n=1)
            found.append((key, close[0] if close else None))
        return found

    def render(self) -> str:
        """One TOML line per setting, sorted, with its source as a comment; the output is
        itself a valid config file."""
        lines = []
        for key in sorted(self.settings):
            setting = self.settings[key]
            lines.append(f"{toml_key(key)} = {toml_value(setting.value)}  # {setting.source.value}")
        return "\n".join(lines) + ("\n" if lines else "")


def load_toml(path: Path) -> dict[str, Value]:
    """The properties of a TOML config file, flattened to Kafka's dotted names."""
    try:
        with path.open("rb") as file:
            document = tomllib.load(file)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    flat: dict[str, Value] = {}
    _flatten(document, "", flat, path)
    return flat


def _flatten(table: Mapping[str, object], prefix: str, out: dict[str, Value], path: Path) -> None:
    for name, raw in table.items():
        key = f"{prefix}{name}"
        if isinstance(raw, dict):
            _flatten(raw, f"{key}.", out, path)
            continue
        if key in out:
            raise ConfigError(f"{path}: {key!r} is given twice (quoted and as a table)")
        out[key] = _scalar(key, raw, path)


def _scalar(key: str, raw: object, path: Path) -> Value:
    if isinstance(raw, bool | int | float | str):
        return raw
    if isinstance(raw, list) and all(isinstance(item, bool | int | float | str) for item in raw):
        return ",".join(_kafka_text(item) for item in raw)
    raise ConfigError(f"{path}: {key!r} has a value Kafka cannot mean: {raw!r}")


def _kafka_text(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_override(text: str) -> tuple[str, str]:
    """`key=value` from a `--config` flag; the value stays text (components parse it)."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"expected key=value, got {text!r}")
    return key, value.strip()


def resolve(
    *,
    defaults: Mapping[str, Value] | None = None,
    file: Path | None = None,
    flags: Mapping[str, Value] | None = None,
) -> EffectiveConfig:
    """Merge defaults < file < flags, keeping each value's source."""
    settings: dict[str, Setting] = {}
    for key, value in (defaults or {}).items():
        settings[key] = Setting(key, value, Source.DEFAULT)
    if file is not None:
        for key, value in load_toml(file).items():
            settings[key] = Setting(key, value, Source.FILE)
    for key, value in (flags or {}).items():
        settings[key] = Setting(key, value, Source.FLAG)
    return EffectiveConfig(dict(sorted(settings.items())), file)


def toml_key(key: str) -> str:
    """`key` as a quoted TOML key, as a config file writes a Kafka property name."""
    # A JSON string is a valid TOML basic string (same escapes, \uXXXX included).
    return json.dumps(key, ensure_ascii=False)


def toml_value(value: Value) -> str:
    """`value` as TOML writes it: a config file's own spelling of a value it holds."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return toml_key(value)  # a basic string, escaped the same way as a key
