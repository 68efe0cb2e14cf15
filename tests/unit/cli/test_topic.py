"""`ketch topic create | delete` without a cluster: what CreateTopics asks for when the counts are
left out, what create prints, the refusals' wording, and the arguments refused before anything is
sent (an illegal name, Kafka's internal topics)."""

from __future__ import annotations

import pytest

from cli import topic as cli_topic
from cli.topic import CLUSTER_DEFAULT, creatable_topic, created_message
from cli.topic_admin import refusal
from wire.errors import ErrorCode

# Nothing listens there: a command that got as far as connecting would fail with exit 1.
NOWHERE = "127.0.0.1:1"


def test_counts_left_out_ask_for_the_cluster_defaults() -> None:
    topic = creatable_topic("orders", None, None, {})
    assert topic.num_partitions == CLUSTER_DEFAULT == -1
    assert topic.replication_factor == CLUSTER_DEFAULT


def test_counts_given_are_sent_as_given() -> None:
    topic = creatable_topic("orders", 6, None, {"retention.ms": "1", "cleanup.policy": "compact"})
    assert topic.num_partitions == 6
    assert topic.replication_factor == CLUSTER_DEFAULT
    assert [(c.name, c.value) for c in topic.configs] == [
        ("cleanup.policy", "compact"),
        ("retention.ms", "1"),
    ]


def test_created_message_names_the_defaults_used() -> None:
    assert created_message("orders", 3, 2, defaulted=[]) == (
        "Created topic 'orders': 3 partition(s), replication factor 2."
    )
    assert created_message(
        "orders", 2, 3, defaulted=["num.partitions", "default.replication.factor"]
    ) == (
        "Created topic 'orders': 2 partition(s), replication factor 3 "
        "(the cluster's num.partitions and default.replication.factor)."
    )


def test_refusal_says_what_to_do() -> None:
    text = refusal("alter", "orders", ErrorCode.INVALID_PARTITIONS, "3 is fewer than 6")
    assert text == (
        "cannot alter topic 'orders': INVALID_PARTITIONS: 3 is fewer than 6; "
        "a topic's partitions can only be increased, and from 1"
    )
    unknown = refusal("delete", "gone", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
    assert unknown == (
        "cannot delete topic 'gone': UNKNOWN_TOPIC_OR_PARTITION; "
        "no such topic; `ketch topic list` shows the topics"
    )
    # A code without a hint keeps the controller's words alone.
    assert refusal("create", "t", ErrorCode.POLICY_VIOLATION, "no") == (
        "cannot create topic 't': POLICY_VIOLATION: no"
    )


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("x" * 300, "a topic name has at most 249 characters; this one has 300"),
        ("a b", "character 2, ' ' (U+0020), is not allowed"),
        ("..", "a topic cannot be named '..'"),
    ],
)
def test_illegal_name_is_a_usage_error_with_the_reason(
    name: str, reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli_topic.main(["topic", "create", name, "--bootstrap", NOWHERE])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "illegal topic name" in err
    assert reason in err


def test_internal_topics_are_not_deleted(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_topic.main(["topic", "delete", "__consumer_offsets", "--bootstrap", NOWHERE])
    err = capsys.readouterr().err
    assert code == 1
    assert "cannot delete topic '__consumer_offsets': it is internal" in err
    assert "cannot reach" not in err  # refused before anything was sent
