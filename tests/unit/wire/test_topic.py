"""Topic names: each illegal name gets its reason (Kafka's Topic.validate order: empty, "."/"..",
length, characters), the '.'-and-'_' warning, and the partition directory names."""

from __future__ import annotations

import pytest

from wire.group_records import OFFSETS_TOPIC
from wire.topic import (
    INTERNAL_TOPICS,
    MAX_TOPIC_NAME_LENGTH,
    TopicPartition,
    quoted_topic_name,
    topic_name_problem,
    topic_name_warning,
    validate_topic_name,
)
from wire.transaction_log import TRANSACTION_STATE_TOPIC


@pytest.mark.parametrize(
    "name",
    ["orders", "a", "A-Z_0.9", "-", "_", "...", "x" * MAX_TOPIC_NAME_LENGTH, "__consumer_offsets"],
)
def test_legal_names_have_no_problem(name: str) -> None:
    assert topic_name_problem(name) is None
    validate_topic_name(name)  # does not raise


def test_too_long_says_the_limit_and_the_length() -> None:
    problem = topic_name_problem("x" * 300)
    assert problem == "a topic name has at most 249 characters; this one has 300"
    assert topic_name_problem("x" * 250) == (
        "a topic name has at most 249 characters; this one has 250"
    )


@pytest.mark.parametrize(
    ("name", "shown", "position"),
    [
        ("a b", "' ' (U+0020)", 2),
        ("a/b", "'/'", 2),
        ("topic\n", "'\\n' (U+000A)", 6),
        ("tópico", "'ó' (U+00F3)", 2),
        ("ok:then/no", "':'", 3),  # the first offending character, not the last
        ("*", "'*'", 1),
    ],
)
def test_illegal_character_is_named_with_its_position(name: str, shown: str, position: int) -> None:
    assert topic_name_problem(name) == (
        f"character {position}, {shown}, is not allowed: a topic name holds only ASCII "
        "letters, digits, '.', '_' and '-'"
    )


@pytest.mark.parametrize("name", [".", ".."])
def test_dot_and_dot_dot(name: str) -> None:
    assert topic_name_problem(name) == f"a topic cannot be named {name!r}"


def test_empty() -> None:
    assert topic_name_problem("") == "a topic name cannot be empty"


def test_length_is_checked_before_characters() -> None:
    # Kafka's order: a long name with a bad character is refused for its length.
    assert topic_name_problem("é" * 300) == (
        "a topic name has at most 249 characters; this one has 300"
    )


def test_validate_raises_with_the_reason_and_a_short_quote() -> None:
    with pytest.raises(ValueError, match="this one has 300") as raised:
        validate_topic_name("y" * 300)
    message = str(raised.value)
    assert message.startswith("illegal topic name 'yyyy")
    assert len(message) < 150, message  # the name is quoted in part, not 300 characters
    with pytest.raises(ValueError, match=r"character 2, ' ' \(U\+0020\)"):
        TopicPartition("a b", 0)


def test_quoted_topic_name_cuts_long_names() -> None:
    assert quoted_topic_name("orders") == "'orders'"
    assert quoted_topic_name("z" * 41) == f"{'z' * 40!r}..."


@pytest.mark.parametrize(
    ("name", "warned"),
    [("site.page_views", True), ("a._", True), ("site.page.views", False), ("a_b", False)],
)
def test_dot_and_underscore_warning(name: str, warned: bool) -> None:
    warning = topic_name_warning(name)
    assert (warning is not None) == warned
    if warning is not None:
        assert "'.' and '_'" in warning
        assert "collide" in warning


def test_the_internal_topic_names_are_the_coordinators_topics() -> None:
    assert frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC}) == INTERNAL_TOPICS
