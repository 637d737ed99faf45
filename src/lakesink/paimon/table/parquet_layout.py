"""How lakesink's own Parquet writers (pyarrow) lay out columns: as Apache Paimon's Java writer does.

Every Parquet file lakesink writes from Python (the Spark-native path's task
writer, compaction and the small-file aggregator) must be readable by every
Paimon engine. Readers are stricter than the format: Paimon's Java reader 1.0
and 1.1 decode a DECIMAL of precision <= 18 only as INT32/INT64 once the column
has dictionary pages (pyarrow's default FIXED_LEN_BYTE_ARRAY fails there), so
the safe layout is the one Paimon writes itself. The mapping, type by type, and
where it comes from: docs/types.md. Spark's own Parquet writer (the fast path)
already matches it.
"""

from __future__ import annotations

import pyarrow as pa

# The smallest pyarrow that can store decimals as integers (`store_decimal_as_integer`).
MIN_PYARROW = (19, 0)


def _check_pyarrow() -> None:
    version = tuple(int(part) for part in pa.__version__.split(".")[:2])
    if version < MIN_PYARROW:
        raise ImportError(
            f"lakesink needs pyarrow >= {MIN_PYARROW[0]}.{MIN_PYARROW[1]} to write Parquet files that "
            f"Apache Paimon's Java readers accept (decimals stored as INT32/INT64); found {pa.__version__}.")


def _timestamp_units(type_: pa.DataType, out: set) -> set:
    if pa.types.is_timestamp(type_):
        out.add(type_.unit)
    elif pa.types.is_struct(type_):
        for i in range(type_.num_fields):
            _timestamp_units(type_.field(i).type, out)
    elif pa.types.is_map(type_):
        _timestamp_units(type_.key_type, out)
        _timestamp_units(type_.item_type, out)
    elif pa.types.is_list(type_) or pa.types.is_large_list(type_) or pa.types.is_fixed_size_list(type_):
        _timestamp_units(type_.value_type, out)
    return out


def nanosecond_layout_problem(schema: pa.Schema) -> str | None:
    """Why lakesink cannot write `schema` as Paimon does (None: it can), naming the columns.

    Paimon stores TIMESTAMP(7..9) as INT96 and its 1.0 reader accepts nothing else for
    them (INT64 nanos fail). Neither of lakesink's writers can produce that exactly:
    pyarrow's INT96 switch applies to every timestamp column of a file (lower precisions
    must stay INT64) and encodes times before 1970 that are not whole days with a negative
    nanos-of-day, which Paimon's reader rejects (measured: tests/interop); Spark's writer
    stores TIMESTAMP_NTZ as INT64 only and its INT96 switch is session-wide. Spark values
    (micros) would fit the column exactly; the file layout is what cannot be made right.
    """
    columns = [field.name for field in schema if "ns" in _timestamp_units(field.type, set())]
    if columns:
        return (f"column(s) {', '.join(columns)} are TIMESTAMP(7..9) (nanoseconds), which Paimon stores "
                "as INT96 Parquet in a layout neither Spark's Parquet writer nor pyarrow reproduces "
                "exactly (a file other Paimon engines could not read). Write this table with Paimon's "
                "own writers (Flink, Paimon's Spark connector, its Java API), or keep Spark's data in a "
                "table whose column is TIMESTAMP(6) / TIMESTAMP_LTZ(6), Spark's precision")
    return None


def writer_options(schema: pa.Schema) -> dict:
    """Keyword arguments for `pyarrow.parquet.ParquetWriter`, besides schema and compression.

    * DECIMAL precision <= 9 as INT32, <= 18 as INT64, larger as FIXED_LEN_BYTE_ARRAY
      of the fewest bytes (pyarrow's default for those).
    * Timestamps in the unit of the column's arrow type, which pypaimon derives from the
      Paimon precision (0-3 ms, 4-6 us, 7-9 ns); no coercion to one unit for the whole
      file (that would change precision-3 columns to micros and fail on nanos). Precision
      7-9 is refused (see nanosecond_layout_problem).
    * Nested types in the standard 3-level LIST/MAP layout (pyarrow's compliant default).
    """
    _check_pyarrow()
    problem = nanosecond_layout_problem(schema)
    if problem is not None:
        from ...errors import UnsupportedTableError
        raise UnsupportedTableError(f"Cannot write Parquet for this table: {problem}.")
    return {
        "store_decimal_as_integer": True,
        "use_deprecated_int96_timestamps": False,
        "use_compliant_nested_type": True,
    }
