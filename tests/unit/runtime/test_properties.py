"""runtime/properties.py: typed values under Kafka's names; config dataclasses read from them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest

from runtime.properties import (
    NOT_A_PROPERTY,
    bool_property,
    config_from_properties,
    int_property,
    property_metadata,
    property_names,
    property_values,
)


def _upper(key: str, raw: object) -> str:
    return str(raw).upper()


@dataclass(frozen=True, slots=True)
class Sample:
    replica_lag_time_max_ms: int = 30_000
    controlled_shutdown_enable: bool = True
    jitter_ratio: float = 0.5
    cluster_id: str = ""
    rack: str | None = None
    node_id: int = field(default=1, metadata=property_metadata("node.id"))
    retention_ms: int = field(
        default=7,
        metadata=property_metadata(
            "retention.ms",
            "log.retention.ms",
            scaled={"log.retention.minutes": 60_000, "log.retention.hours": 3_600_000},
        ),
    )
    listener: str = field(default="native", metadata=property_metadata(parse=_upper))
    set_by_code: str = field(default="code", metadata=NOT_A_PROPERTY)

    def __post_init__(self) -> None:
        if self.replica_lag_time_max_ms < 1:
            raise ValueError("replica.lag.time.max.ms must be >= 1")


@dataclass(frozen=True, slots=True)
class Required:
    broker_id: int
    nested: Sample = field(default_factory=Sample)
    limit: int = 5


def test_int_and_bool_properties() -> None:
    assert int_property({"a.b": "12"}, "a.b", 1) == 12
    assert int_property({}, "a.b", 1) == 1
    assert bool_property({"a.b": " TRUE "}, "a.b", False) is True
    with pytest.raises(ValueError, match=r"a\.b: expected an integer"):
        int_property({"a.b": True}, "a.b", 1)
    with pytest.raises(ValueError, match=r"a\.b: expected true or false"):
        bool_property({"a.b": "yes"}, "a.b", False)


def test_defaults_when_nothing_is_set() -> None:
    assert config_from_properties(Sample, {}) == Sample()


def test_field_names_map_to_dotted_property_names() -> None:
    assert property_names(Sample) == {
        "replica_lag_time_max_ms": ("replica.lag.time.max.ms",),
        "controlled_shutdown_enable": ("controlled.shutdown.enable",),
        "jitter_ratio": ("jitter.ratio",),
        "cluster_id": ("cluster.id",),
        "rack": ("rack",),
        "node_id": ("node.id",),
        "retention_ms": ("retention.ms", "log.retention.ms"),
        "listener": ("listener",),
    }
    config = config_from_properties(Sample, {"replica.lag.time.max.ms": 10, "node.id": 4})
    assert (config.replica_lag_time_max_ms, config.node_id) == (10, 4)
    # The field's own name is not a property name once metadata overrides it.
    assert config_from_properties(Sample, {"node.id.x": 9, "node_id": 9}).node_id == 1


def test_values_are_converted_by_field_type() -> None:
    config = config_from_properties(
        Sample,
        {
            "replica.lag.time.max.ms": " 250 ",
            "controlled.shutdown.enable": "False",
            "jitter.ratio": "0.25",
            "cluster.id": 42,
            "rack": "r1",
            "listener": "kafka",
        },
    )
    assert config.replica_lag_time_max_ms == 250
    assert config.controlled_shutdown_enable is False
    assert config.jitter_ratio == 0.25
    assert config.cluster_id == "42"
    assert config.rack == "r1"
    assert config.listener == "KAFKA"  # the field's parse
    assert config_from_properties(Sample, {"jitter.ratio": 1}).jitter_ratio == 1.0
    assert config_from_properties(Sample, {"rack": None}).rack is None


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"replica.lag.time.max.ms": True}, r"replica\.lag\.time\.max\.ms: expected an integer"),
        ({"replica.lag.time.max.ms": 1.5}, r"replica\.lag\.time\.max\.ms: expected an integer"),
        ({"node.id": "soon"}, r"node\.id: expected an integer"),
        ({"controlled.shutdown.enable": 1}, r"controlled\.shutdown\.enable: expected true"),
        ({"jitter.ratio": False}, r"jitter\.ratio: expected a number"),
        ({"jitter.ratio": "half"}, r"jitter\.ratio: expected a number"),
        ({"log.retention.hours": "x"}, r"log\.retention\.hours: expected an integer"),
    ],
)
def test_unreadable_values_are_refused_naming_the_key(
    props: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        config_from_properties(Sample, props)


def test_range_checks_stay_in_post_init() -> None:
    with pytest.raises(ValueError, match=r"replica\.lag\.time\.max\.ms must be >= 1"):
        config_from_properties(Sample, {"replica.lag.time.max.ms": 0})


def test_names_in_order_of_precedence_then_scaled_units() -> None:
    both = config_from_properties(Sample, {"retention.ms": 5, "log.retention.ms": 6})
    assert both.retention_ms == 5
    assert config_from_properties(Sample, {"log.retention.ms": 6}).retention_ms == 6
    assert config_from_properties(Sample, {"log.retention.hours": 2}).retention_ms == 7_200_000
    minutes_first = {"log.retention.minutes": 3, "log.retention.hours": 2}
    assert config_from_properties(Sample, minutes_first).retention_ms == 180_000
    explicit = {"log.retention.ms": 9, "log.retention.hours": 2}
    assert config_from_properties(Sample, explicit).retention_ms == 9


def test_other_keys_are_ignored_unless_strict() -> None:
    props = {"cluster.id": "prod", "socket.request.max.bytes": 10, "set.by.code": "x"}
    config = config_from_properties(Sample, props)
    assert config == Sample(cluster_id="prod")
    assert config.set_by_code == "code"  # a field no property sets
    with pytest.raises(ValueError, match=r"unknown Sample property 'socket\.request\.max\.bytes'"):
        config_from_properties(Sample, props, strict=True)
    with pytest.raises(ValueError, match="unknown Sample property 'cluster_id'"):
        config_from_properties(Sample, {"cluster_id": "prod"}, strict=True)
    # Every name a field is read from is known, the scaled ones included.
    strict = config_from_properties(
        Sample, {"cluster.id": "prod", "log.retention.minutes": 1}, strict=True
    )
    assert (strict.cluster_id, strict.retention_ms) == ("prod", 60_000)


def test_given_fields_are_taken_as_they_are() -> None:
    nested = Sample(cluster_id="inner")
    config = config_from_properties(
        Required, {"broker.id": "x", "limit": "9"}, broker_id=3, nested=nested
    )
    assert config == Required(3, nested, 9)


def test_a_required_field_neither_given_nor_set_is_refused() -> None:
    with pytest.raises(ValueError, match=r"broker\.id is required"):
        config_from_properties(Required, {}, nested=Sample())
    assert config_from_properties(Required, {"broker.id": 2}, nested=Sample()).broker_id == 2


def test_a_field_without_a_conversion_must_be_given() -> None:
    with pytest.raises(TypeError, match=r"Required\.nested"):
        config_from_properties(Required, {"broker.id": 2})


def test_property_values_apply_over_an_existing_config() -> None:
    base = Sample(cluster_id="prod", node_id=5)
    changes = property_values(Sample, {"node.id": "6", "unrelated": 1})
    assert changes == {"node_id": 6}
    changed = dataclasses.replace(base, **changes)  # type: ignore[arg-type]
    assert (changed.cluster_id, changed.node_id) == ("prod", 6)
