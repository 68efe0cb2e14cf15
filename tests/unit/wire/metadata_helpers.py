"""A metadata record packed with msgpack and decoded again, as the metadata log stores it; shared
by the record codec tests (test_metadata_records.py) and the controller model's replay tests
(tests/unit/actors/controller/test_model.py). A pure function: no state."""

from __future__ import annotations

import msgpack

from wire.metadata_records import Record, decode_record, encode_record


def through_msgpack(record: Record) -> Record:
    packed = msgpack.packb(encode_record(record), use_bin_type=True)
    return decode_record(msgpack.unpackb(packed, raw=False))
