"""How `ketch consume` prints a record: a kcat format string (`--format`), one JSON object per
record (`--json`), or the default line (the value; `-K SEP`: key SEP value; `--print-offsets`:
partition TAB offset TAB before it).

Format strings take kcat's tokens (`kcat -h`, "Format string tokens"):

    %t topic        %p partition        %o offset       %T timestamp (ms since the epoch)
    %k key          %s value            %K key size     %S value size (bytes; -1 for null)
    %h headers as name=value,name=value (a null header value prints NULL)
    %%  a percent sign
    \\n \\r \\t  newline, carriage return, tab     \\xHH  the character with hex code HH
    \\\\  a backslash; a backslash before any other character stands for that character

`%v` is accepted for the value too (rpk's and the issue's name; kcat's is `%s`). As in kcat a null
key or value prints as nothing in a format string and as -1 in its size; a format string adds no
line end of its own (end it with `\\n`). Any other `%` token is an error, reported when the
flag is parsed.

Text. Keys, values and header values are bytes; they are printed as UTF-8 with undecodable
bytes replaced (U+FFFD), so a binary value never breaks the output or the terminal's encoding;
sizes (%K, %S) are the stored byte counts. The default line prints a null value (or key) as
`null`, as Kafka's console consumer does.

JSON (`--json`, one object per line, Kafka field names):

    {"topic": str, "partition": int, "offset": int, "timestamp": int (ms),
     "key": str|null, "value": str|null, "headers": [{"key": str, "value": str|null}, ...]}

A key, value or header value that is not valid UTF-8 is given in base64 instead, and the object
says so with "key_encoding": "base64" (or "value_encoding", or "value_encoding" inside the
header): kcat writes such bytes raw into its JSON, which then is no longer valid JSON.

Pure functions of a record; no state.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from client.fetched_records import ConsumerRecord

Render = Callable[[ConsumerRecord], str]

_ESCAPES: Final = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\"}
_HEX_DIGITS: Final = frozenset("0123456789abcdefABCDEF")


def text(data: bytes | None, null: str) -> str:
    """Bytes as printable text (undecodable bytes replaced); `null` for None."""
    return null if data is None else data.decode("utf-8", errors="replace")


def _size(data: bytes | None) -> str:
    return "-1" if data is None else str(len(data))


def headers_text(headers: Sequence[tuple[str, bytes | None]]) -> str:
    """kcat's %h: name=value pairs joined by commas, a null value as NULL."""
    return ",".join(f"{name}={text(value, 'NULL')}" for name, value in headers)


_FIELDS: Final[dict[str, Render]] = {
    "t": lambda r: r.topic,
    "p": lambda r: str(r.partition),
    "o": lambda r: str(r.offset),
    "T": lambda r: str(r.timestamp_ms),
    "k": lambda r: text(r.key, ""),
    "s": lambda r: text(r.value, ""),
    "v": lambda r: text(r.value, ""),
    "K": lambda r: _size(r.key),
    "S": lambda r: _size(r.value),
    "h": lambda r: headers_text(r.headers),
}


def unescape(spec: str) -> str:
    """kcat's backslash escapes (the module docstring); ValueError for a bad \\x."""
    out: list[str] = []
    index = 0
    while index < len(spec):
        char = spec[index]
        if char != "\\" or index + 1 == len(spec):
            out.append(char)
            index += 1
            continue
        code = spec[index + 1]
        if code == "x":
            digits = spec[index + 2 : index + 4]
            if len(digits) != 2 or not set(digits) <= _HEX_DIGITS:
                raise ValueError(f"\\x needs two hex digits, as in \\x1f: {spec!r}")
            out.append(chr(int(digits, 16)))
            index += 4
            continue
        out.append(_ESCAPES.get(code, code))
        index += 2
    return "".join(out)


@dataclass(frozen=True, slots=True)
class RecordFormat:
    """A parsed format string: literal text and fields, in order."""

    parts: tuple[str | Render, ...]

    @classmethod
    def parse(cls, spec: str) -> RecordFormat:
        """ValueError (naming the token) for an unknown `%` token or a `%` at the end."""
        parts: list[str | Render] = []
        literal: list[str] = []
        index = 0
        while index < len(spec):
            char = spec[index]
            if char != "%":
                literal.append(char)
                index += 1
                continue
            if index + 1 == len(spec):
                raise ValueError("the format ends with a lone '%' (write %% for a percent sign)")
            token = spec[index + 1]
            index += 2
            if token == "%":
                literal.append("%")
                continue
            field = _FIELDS.get(token)
            if field is None:
                known = " ".join(f"%{t}" for t in _FIELDS)
                raise ValueError(f"unknown format token %{token} (known: {known} %%)")
            if literal:
                parts.append(unescape("".join(literal)))
                literal = []
            parts.append(field)
        if literal:
            parts.append(unescape("".join(literal)))
        return cls(tuple(parts))

    def render(self, record: ConsumerRecord) -> str:
        return "".join(part if isinstance(part, str) else part(record) for part in self.parts)


def _json_bytes(data: bytes | None) -> tuple[str | None, bool]:
    """(the JSON text of `data`, whether it is base64)."""
    if data is None:
        return None, False
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), True


def record_json(record: ConsumerRecord) -> str:
    """One line of JSON for `record` (shape in the module docstring), with its line end."""
    key, key_b64 = _json_bytes(record.key)
    value, value_b64 = _json_bytes(record.value)
    document: dict[str, object] = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp_ms,
        "key": key,
        "value": value,
        "headers": [_header_json(name, raw) for name, raw in record.headers],
    }
    if key_b64:
        document["key_encoding"] = "base64"
    if value_b64:
        document["value_encoding"] = "base64"
    return json.dumps(document, ensure_ascii=False) + "\n"


def _header_json(name: str, raw: bytes | None) -> dict[str, object]:
    value, is_b64 = _json_bytes(raw)
    header: dict[str, object] = {"key": name, "value": value}
    if is_b64:
        header["value_encoding"] = "base64"
    return header


def line_format(*, print_offsets: bool, key_separator: str | None) -> Render:
    """The default line: [partition TAB offset TAB] [key SEP] value, and a line end."""

    def render(record: ConsumerRecord) -> str:
        line = text(record.value, "null")
        if key_separator is not None:
            line = f"{text(record.key, 'null')}{key_separator}{line}"
        if print_offsets:
            line = f"{record.partition}\t{record.offset}\t{line}"
        return line + "\n"

    return render
