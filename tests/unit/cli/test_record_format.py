"""How `ketch consume` prints records: kcat's format tokens and escapes, the JSON objects, the
default lines (cli/record_format.py)."""

from __future__ import annotations

import base64
import json

import pytest

from cli.record_format import RecordFormat, line_format, record_json, unescape
from client.fetched_records import ConsumerRecord

RECORD = ConsumerRecord(
    topic="orders",
    partition=2,
    offset=41,
    timestamp_ms=1_700_000_000_123,
    key=b"user-7",
    value=b"paid 12.50",
    headers=(("source", b"cli"), ("trace", None), ("empty", b"")),
)
NULLS = ConsumerRecord(topic="t", partition=0, offset=0, timestamp_ms=5, key=None, value=None)
BINARY = ConsumerRecord(
    topic="t",
    partition=0,
    offset=1,
    timestamp_ms=6,
    key=b"\xff\xfe",
    value=b"ok \xc3\xa9",
    headers=(("h", b"\x80"),),
)


def render(spec: str, record: ConsumerRecord = RECORD) -> str:
    return RecordFormat.parse(spec).render(record)


def test_every_kcat_token() -> None:
    spec = "%t %p %o %T %k %s %v %K %S %h %%"
    assert render(spec) == (
        "orders 2 41 1700000000123 user-7 paid 12.50 paid 12.50 6 10 source=cli,trace=NULL,empty= %"
    )


def test_kcat_readme_example_with_escapes() -> None:
    spec = "Topic %t[%p], offset: %o, key: %k, payload: %S bytes: %s\\n"
    expected = "Topic orders[2], offset: 41, key: user-7, payload: 10 bytes: paid 12.50\n"
    assert render(spec) == expected
    assert render("%k\\t%s\\r\\n") == "user-7\tpaid 12.50\r\n"


def test_null_key_and_value_print_nothing_and_size_minus_one_as_kcat() -> None:
    assert render("[%k][%s][%K][%S][%h]", NULLS) == "[][][-1][-1][]"


def test_undecodable_bytes_are_replaced_and_sizes_count_bytes() -> None:
    assert render("%k|%s|%K|%S|%h", BINARY) == "\ufffd\ufffd|ok é|2|5|h=\ufffd"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("a\\\\b", "a\\b"),
        ("\\x41\\x7e", "A~"),
        ("\\q", "q"),  # kcat: a backslash before another character stands for it
        ("end\\", "end\\"),
        ("100%%", "100%"),
    ],
)
def test_escapes(spec: str, expected: str) -> None:
    assert render(spec) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [("%x", "unknown format token %x"), ("value %", "lone '%'"), ("\\x4", "two hex digits")],
)
def test_bad_format_strings_are_refused(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RecordFormat.parse(spec)


def test_unescape_alone() -> None:
    assert unescape("\\t") == "\t"
    assert unescape(" => ") == " => "


def test_json_record_shape() -> None:
    line = record_json(RECORD)
    assert line.endswith("\n")
    assert "\n" not in line[:-1]
    assert json.loads(line) == {
        "topic": "orders",
        "partition": 2,
        "offset": 41,
        "timestamp": 1_700_000_000_123,
        "key": "user-7",
        "value": "paid 12.50",
        "headers": [
            {"key": "source", "value": "cli"},
            {"key": "trace", "value": None},
            {"key": "empty", "value": ""},
        ],
    }
    assert json.loads(record_json(NULLS))["key"] is None
    assert json.loads(record_json(NULLS))["value"] is None


def test_json_gives_bytes_that_are_not_utf8_in_base64_and_says_so() -> None:
    document = json.loads(record_json(BINARY))
    assert document["key"] == base64.b64encode(b"\xff\xfe").decode()
    assert document["key_encoding"] == "base64"
    assert document["value"] == "ok é"
    assert "value_encoding" not in document
    assert document["headers"] == [
        {"key": "h", "value": base64.b64encode(b"\x80").decode(), "value_encoding": "base64"}
    ]


def test_default_lines() -> None:
    assert line_format(print_offsets=False, key_separator=None)(RECORD) == "paid 12.50\n"
    assert line_format(print_offsets=False, key_separator=" => ")(RECORD) == (
        "user-7 => paid 12.50\n"
    )
    assert line_format(print_offsets=True, key_separator=":")(RECORD) == (
        "2\t41\tuser-7:paid 12.50\n"
    )
    assert line_format(print_offsets=True, key_separator=":")(NULLS) == "0\t0\tnull:null\n"
