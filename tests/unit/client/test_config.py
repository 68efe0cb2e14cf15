"""Client, producer and consumer settings from Kafka property names."""

from __future__ import annotations

import pytest

from client.config import ACKS_ALL, ClientConfig, ConsumerConfig, ProducerConfig


def test_defaults_are_kafkas() -> None:
    config = ClientConfig()
    assert config.request_timeout_ms == 30_000
    assert (config.reconnect_backoff_ms, config.reconnect_backoff_max_ms) == (50, 1000)
    assert ProducerConfig().acks == ACKS_ALL
    assert ProducerConfig().batch_size == 16_384
    assert ConsumerConfig().fetch_max_wait_ms == 500
    assert ConsumerConfig().auto_offset_reset == "latest"


def test_from_properties_reads_dotted_names_and_converts_types() -> None:
    config = ClientConfig.from_properties({"request.timeout.ms": "1500", "retry.backoff.ms": 7})
    assert config.request_timeout_ms == 1500
    assert config.retry_backoff_ms == 7
    producer = ProducerConfig.from_properties({"acks": "all", "linger.ms": "3"})
    assert (producer.acks, producer.linger_ms) == (ACKS_ALL, 3)
    consumer = ConsumerConfig.from_properties({"auto.offset.reset": "earliest"})
    assert consumer.auto_offset_reset == "earliest"


def test_unknown_and_invalid_settings_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown ClientConfig property"):
        ClientConfig.from_properties({"request.timeout": 1})
    with pytest.raises(ValueError, match="positive"):
        ClientConfig(request_timeout_ms=0)
    with pytest.raises(ValueError, match="acks"):
        ProducerConfig(acks=2)
    with pytest.raises(ValueError, match=r"auto\.offset\.reset"):
        ConsumerConfig(auto_offset_reset="smallest")
    with pytest.raises(ValueError, match=r"request\.timeout\.ms must exceed"):
        ConsumerConfig(request_timeout_ms=100, fetch_max_wait_ms=500)
