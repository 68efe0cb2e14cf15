"""The schemas of the "ketch" Spark data source, in Spark and Arrow form.

Three levels, each a fixed column list (other offline jobs, e.g. compaction, build on the names
and types, so they are part of the contract):

* ``BATCH_SCHEMA`` — one row per RecordBatch of a segment file, from the 61-byte header plus the
  CRC-32C computed over the batch. ``valid`` is false with a ``reason`` for a batch that fails
  its own checks (CRC, magic, length, codec, counts) or is torn; ``reason`` starts with a kind
  token (``crc_mismatch: ...``) so a reader can group findings without parsing prose. Header
  fields that could not be read (a torn or garbage tail) are null.
* ``RECORD_SCHEMA`` — one row per record of each *valid* batch (compressed batches are
  decompressed). ``batch_valid`` is therefore always true; it is kept so a reader can assert it.
* ``INDEX_SCHEMA`` — one row per entry of a segment's ``.index`` (kind ``offset``: ``offset`` and
  ``position``) or ``.timeindex`` (kind ``time``: ``timestamp`` and ``offset``), with absolute
  offsets. A file-level problem (missing file, length not whole entries) is a row with
  ``slot`` -1 and ``problem`` set.

Spark and Arrow types pair as: string/utf8, int/int32, long/int64, short/int16, byte/int8,
boolean/bool_, binary/binary. The Arrow schemas are derived from the Spark ones so they cannot
drift apart. Immutable module constants: nothing to own or lock.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
)

# The codec names by attributes bits 0-2; ids 5-7 are not codecs (such a batch is invalid and
# its compression column null).
COMPRESSION_NAMES: Final = ("none", "gzip", "snappy", "lz4", "zstd", None, None, None)

_LOCATION: Final = (
    StructField("broker_dir", StringType(), False),
    StructField("topic", StringType(), False),
    StructField("partition", IntegerType(), False),
    StructField("segment", LongType(), False),
)

BATCH_SCHEMA: Final = StructType(
    [
        *_LOCATION,
        StructField("position", LongType(), False),
        StructField("base_offset", LongType(), True),
        StructField("last_offset", LongType(), True),
        StructField("leader_epoch", IntegerType(), True),
        StructField("magic", ByteType(), True),
        StructField("attributes", ShortType(), True),
        StructField("compression", StringType(), True),
        StructField("is_transactional", BooleanType(), True),
        StructField("is_control", BooleanType(), True),
        StructField("base_timestamp", LongType(), True),
        StructField("max_timestamp", LongType(), True),
        StructField("producer_id", LongType(), True),
        StructField("producer_epoch", ShortType(), True),
        StructField("base_sequence", IntegerType(), True),
        StructField("record_count", IntegerType(), True),
        StructField("size_bytes", IntegerType(), False),
        StructField("stored_crc", LongType(), True),
        StructField("computed_crc", LongType(), True),
        StructField("valid", BooleanType(), False),
        StructField("reason", StringType(), True),
    ]
)

HEADER_TYPE: Final = StructType(
    [StructField("key", StringType(), False), StructField("value", BinaryType(), True)]
)

RECORD_SCHEMA: Final = StructType(
    [
        *_LOCATION,
        StructField("batch_position", LongType(), False),
        StructField("batch_base_offset", LongType(), False),
        StructField("offset", LongType(), False),
        StructField("timestamp", LongType(), False),
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("headers", ArrayType(HEADER_TYPE, False), False),
        StructField("is_control", BooleanType(), False),
        StructField("batch_valid", BooleanType(), False),
    ]
)

INDEX_SCHEMA: Final = StructType(
    [
        *_LOCATION,
        StructField("index_kind", StringType(), False),  # "offset" or "time"
        StructField("slot", IntegerType(), False),  # -1 for a file-level problem
        StructField("offset", LongType(), True),
        StructField("position", LongType(), True),  # offset index only
        StructField("timestamp", LongType(), True),  # time index only
        StructField("problem", StringType(), True),
    ]
)

LEVELS: Final = {"batch": BATCH_SCHEMA, "record": RECORD_SCHEMA, "index": INDEX_SCHEMA}


def _arrow_type(spark_type: DataType) -> pa.DataType:
    if isinstance(spark_type, StructType):
        return pa.struct([_arrow_field(f) for f in spark_type.fields])
    if isinstance(spark_type, ArrayType):
        element = pa.field("element", _arrow_type(spark_type.elementType), spark_type.containsNull)
        return pa.list_(element)
    simple: dict[type[DataType], pa.DataType] = {
        StringType: pa.string(),
        IntegerType: pa.int32(),
        LongType: pa.int64(),
        ShortType: pa.int16(),
        ByteType: pa.int8(),
        BooleanType: pa.bool_(),
        BinaryType: pa.binary(),
    }
    return simple[type(spark_type)]


def _arrow_field(field: StructField) -> pa.Field:
    return pa.field(field.name, _arrow_type(field.dataType), field.nullable)


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema whose record batches Spark reads as `schema`."""
    return pa.schema([_arrow_field(f) for f in schema.fields])


BATCH_ARROW: Final = arrow_schema(BATCH_SCHEMA)
RECORD_ARROW: Final = arrow_schema(RECORD_SCHEMA)
INDEX_ARROW: Final = arrow_schema(INDEX_SCHEMA)
