"""Reading typed values from a property map under Kafka's names.

Configs arrive as TOML values, `--set k=v` strings or Python literals in tests, so a number may
be an int or its text and a flag a bool or "true"/"false". A bool where a number belongs, or
anything unreadable, is a ValueError naming the key: a node refuses a bad config at startup
rather than running with a guess.
"""

from __future__ import annotations

from collections.abc import Mapping


def int_property(properties: Mapping[str, object], key: str, default: int) -> int:
    raw = properties.get(key, default)
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise ValueError(f"{key}: expected an integer, got {raw!r}")
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{key}: expected an integer, got {raw!r}") from None


def bool_property(properties: Mapping[str, object], key: str, default: bool) -> bool:
    raw = properties.get(key, default)
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise ValueError(f"{key}: expected true or false, got {raw!r}")
