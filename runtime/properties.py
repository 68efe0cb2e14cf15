"""Reading typed values from a property map under Kafka's names.

Configs arrive as TOML values, `--set k=v` strings or Python literals in tests, so a number may
be an int or its text and a flag a bool or "true"/"false". A bool where a number belongs, or
anything unreadable, is a ValueError naming the key: a node refuses a bad config at startup
rather than running with a guess.

`config_from_properties` builds a config dataclass from such a map, one field per property: the
property's name is the field's with dots for underscores (`replica_lag_time_max_ms` is
`replica.lag.time.max.ms`), unless the field's metadata says otherwise (`property_metadata`).
The value is converted by the field's type; checking the value's range is left to the class's
`__post_init__`, so a config built by hand is checked the same way. Field metadata keys:

    "property"  the name, or names in order of precedence (a topic-level name before the broker
                one), or None for a field no property sets
    "scaled"    {name: factor}: properties in a coarser unit (`log.retention.hours` for
                `retention_ms`), consulted in order only when none of the names is given
    "parse"     `(key, raw) -> value`, for a type the reader does not convert itself

A value that cannot be converted is a `PropertyValueError` (a ValueError) carrying the key, the
raw value and the reason in a user's words ("not an integer"), so a caller that reports
configuration problems (node/config_check.py) can name all three without parsing the text.

A field's annotation must resolve at run time (`typing.get_type_hints`), which rules out names
imported only under TYPE_CHECKING. The functions here are pure; a class's reading plan is
computed once and cached.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_T = TypeVar("_T", bound="DataclassInstance")

Parse = Callable[[str, object], object]
"""`parse(key, raw) -> value`: reads one property's raw value; ValueError naming `key` if bad."""

PROPERTY: Final = "property"
SCALED: Final = "scaled"
PARSE: Final = "parse"
# The metadata of a field that no property sets (the code that builds the config fills it).
NOT_A_PROPERTY: Final[Mapping[str, object]] = types.MappingProxyType({PROPERTY: None})


class PropertyValueError(ValueError):
    """A property's value that cannot be read as its type: `reason` says why in a user's words
    ("not an integer"); the text is `key: expected ..., got raw`."""

    def __init__(self, key: str, raw: object, expected: str, reason: str) -> None:
        super().__init__(f"{key}: expected {expected}, got {raw!r}")
        self.key = key
        self.raw = raw
        self.reason = reason


def parse_int(key: str, raw: object) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise PropertyValueError(key, raw, "an integer", "not an integer")
    try:
        return int(raw)
    except ValueError:
        # Python's own text ("invalid literal for int() with base 10") means nothing to a user.
        raise PropertyValueError(key, raw, "an integer", "not an integer") from None


def parse_bool(key: str, raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise PropertyValueError(key, raw, "true or false", "not true or false")


def parse_float(key: str, raw: object) -> float:
    # A bool is refused here too: True is an int to Python, never a number in a config.
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise PropertyValueError(key, raw, "a number", "not a number")
    try:
        return float(raw)
    except ValueError:
        raise PropertyValueError(key, raw, "a number", "not a number") from None


def parse_str(key: str, raw: object) -> str:
    return str(raw)


def int_property(properties: Mapping[str, object], key: str, default: int) -> int:
    return parse_int(key, properties.get(key, default))


def bool_property(properties: Mapping[str, object], key: str, default: bool) -> bool:
    return parse_bool(key, properties.get(key, default))


def property_metadata(
    *names: str, scaled: Mapping[str, int] | None = None, parse: Parse | None = None
) -> Mapping[str, object]:
    """Field metadata for a field read from `names` (default: the field's name with dots),
    or from a `scaled` property, or with `parse`. See the module docstring."""
    metadata: dict[str, object] = {}
    if names:
        metadata[PROPERTY] = names
    if scaled:
        metadata[SCALED] = dict(scaled)
    if parse is not None:
        metadata[PARSE] = parse
    return types.MappingProxyType(metadata)


# Conversions by field type; a type absent here needs a "parse" in the field's metadata.
_CONVERSIONS: Final[Mapping[object, Parse]] = {
    int: parse_int,
    bool: parse_bool,
    float: parse_float,
    str: parse_str,
}


@dataclass(frozen=True, slots=True)
class _FieldPlan:
    """How one field is read: its names in order of precedence, then its scaled names."""

    name: str
    names: tuple[str, ...]
    scaled: tuple[tuple[str, int], ...]
    parse: Parse | None  # None: no conversion known; the caller must give the value
    optional: bool  # `X | None`: a raw None stays None
    required: bool  # no default: absent and not given is an error

    def all_names(self) -> Iterable[str]:
        yield from self.names
        yield from (key for key, _ in self.scaled)


@functools.cache
def _plan(cls: type[DataclassInstance]) -> tuple[_FieldPlan, ...]:
    hints = typing.get_type_hints(cls)
    plans: list[_FieldPlan] = []
    for spec in dataclasses.fields(cls):
        if not spec.init:
            continue
        meta = spec.metadata
        names_meta = meta.get(PROPERTY, spec.name.replace("_", "."))
        if names_meta is None:
            continue
        names = (names_meta,) if isinstance(names_meta, str) else tuple(names_meta)
        scaled = tuple(dict(meta.get(SCALED, {})).items())
        hint = hints[spec.name]
        optional = False
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
            optional = len(args) < len(typing.get_args(hint))
            if optional and len(args) == 1:
                hint = args[0]
        parse: Parse | None = meta.get(PARSE, _CONVERSIONS.get(hint))
        # A scaled name multiplies an integer: a field read from one must be an int.
        assert not scaled or hint is int, (cls, spec.name)
        required = (
            spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING
        )
        plans.append(_FieldPlan(spec.name, names, scaled, parse, optional, required))
    return tuple(plans)


def property_names(cls: type[DataclassInstance]) -> dict[str, tuple[str, ...]]:
    """Field name -> the property names that set it, in order of precedence (the scaled ones
    not included); fields no property sets are left out."""
    return {plan.name: plan.names for plan in _plan(cls)}


def property_synonyms(cls: type[DataclassInstance]) -> dict[str, frozenset[str]]:
    """Each name that sets a field of `cls` (scaled ones included) -> every name that sets the
    same field, itself included: Kafka's config synonyms (log.retention.ms, .minutes, .hours)."""
    synonyms: dict[str, frozenset[str]] = {}
    for plan in _plan(cls):
        names = frozenset(plan.all_names())
        synonyms.update(dict.fromkeys(names, names))
    return synonyms


def _read(
    cls: type[DataclassInstance],
    properties: Mapping[str, object],
    strict: bool,
    given: Iterable[str],
) -> dict[str, object]:
    plans = _plan(cls)
    if strict:
        known = {key for plan in plans for key in plan.all_names()}
        for key in properties:
            if key not in known:
                raise ValueError(f"unknown {cls.__name__} property {key!r}")
    skip = frozenset(given)
    values: dict[str, object] = {}
    for plan in plans:
        if plan.name in skip:
            continue
        if plan.parse is None:
            raise TypeError(
                f"{cls.__name__}.{plan.name}: no conversion for its type; give the value, "
                "or a parse in its field metadata"
            )
        found = next((k for k in plan.names if k in properties), None)
        if found is not None:
            raw = properties[found]
            values[plan.name] = None if plan.optional and raw is None else plan.parse(found, raw)
            continue
        scaled = next(((k, factor) for k, factor in plan.scaled if k in properties), None)
        if scaled is not None:
            values[plan.name] = parse_int(scaled[0], properties[scaled[0]]) * scaled[1]
        elif plan.required:
            raise ValueError(f"{plan.names[0]} is required")
    return values


def property_values(
    cls: type[DataclassInstance], properties: Mapping[str, object], *, strict: bool = False
) -> dict[str, object]:
    """The fields of `cls` that `properties` sets, converted, by field name (for
    `dataclasses.replace` over an existing config). Unknown keys are ignored, since a node's
    map holds every component's keys, unless `strict` (a ValueError naming the first)."""
    return _read(cls, properties, strict, ())


def config_from_properties(
    cls: type[_T], properties: Mapping[str, object], *, strict: bool = False, **given: object
) -> _T:
    """`cls` built from `properties` over its defaults. `given` fields are taken as they are,
    not read (values the caller computes, such as a nested config read from the same map).
    Unknown keys are ignored unless `strict`; a required field neither given nor set is a
    ValueError, and so is a value that cannot be converted; `__post_init__` checks the rest."""
    values = _read(cls, properties, strict, given)
    return cls(**values, **given)


def defaults_by_property(config: DataclassInstance) -> dict[str, object]:
    """Each property that sets a field of `config`, with that field's value in `config` (its
    defaults, for a config built with none given): what `ketch config show` lists. A field set
    by several names is listed under its first."""
    return {names[0]: getattr(config, name) for name, names in property_names(type(config)).items()}
