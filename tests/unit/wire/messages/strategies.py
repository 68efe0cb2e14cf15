"""Hypothesis strategies for the native messages, and the registered message classes.

`dataclass_strategy(cls)` draws any value of a message (or nested dataclass) from its field
types, mirroring the codec's supported types (wire/messages/fields.py); `REQUESTS` and `MESSAGES`
list every registered request, and every request and response. Used by the tests beside this
module and by tests/unit/wire/test_fuzz_codec.py. Module-level values, read only.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Annotated, Any

from hypothesis import strategies as st

from wire import messages as m
from wire.messages import FixedLen, IntRange
from wire.messages.fields import AnyBuffer

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def strategy_for(hint: Any) -> st.SearchStrategy[Any]:
    """A hypothesis strategy for one field type, mirroring the codec's supported types."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        base, *meta = typing.get_args(hint)
        for mark in meta:
            if isinstance(mark, AnyBuffer):
                # Built from either; decoded as bytes (equal to the view it was sent as).
                binary = st.binary(max_size=48)
                return binary | binary.map(lambda data: memoryview(data).toreadonly())
            if isinstance(mark, FixedLen):
                return st.binary(min_size=mark.size, max_size=mark.size)
            if isinstance(mark, IntRange):
                return st.integers(min_value=mark.low, max_value=mark.high)
        return strategy_for(base)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return st.none() | strategy_for(inner)
    if origin is list:
        (inner,) = typing.get_args(hint)
        return st.lists(strategy_for(inner), max_size=3)
    simple: dict[Any, st.SearchStrategy[Any]] = {
        int: INT64,
        bool: st.booleans(),
        str: st.text(max_size=12),
        bytes: st.binary(max_size=48),
        float: st.floats(allow_nan=False),
    }
    if hint in simple:
        return simple[hint]
    assert isinstance(hint, type), hint
    assert dataclasses.is_dataclass(hint), hint
    return dataclass_strategy(hint)


def dataclass_strategy(cls: type) -> st.SearchStrategy[Any]:
    hints = typing.get_type_hints(cls, include_extras=True)
    kwargs = {f.name: strategy_for(hints[f.name]) for f in dataclasses.fields(cls)}
    return st.builds(cls, **kwargs)


REQUESTS = m.registered_requests()
MESSAGES: list[type[m.Message]] = [c for r in REQUESTS for c in (r, r.RESPONSE)]


def class_name(cls: type) -> str:
    return cls.__name__
