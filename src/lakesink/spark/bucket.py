"""Paimon's fixed-bucket function as Spark column expressions (evaluated in the JVM).

Paimon puts a row in bucket `abs(h % n)` (Java's truncating `%`), where `h` is
Murmur3-32 (seed 42, over 4-byte little-endian words) of the bucket-key row in
Paimon's `BinaryRow` layout:

    header   8 bytes: row kind (0) in byte 0, then one null bit per field from bit 8
    slots    8 bytes per field: the value (little-endian, zero-padded), or for
             variable-length values `offset << 32 | length` (offset from row start)
    var part strings/binary over 7 bytes (padded to 8), non-compact decimals
             (16 bytes) and non-compact timestamps (8 bytes), in field order

Spark's own `hash()` of a binary value is the same Murmur3 with seed 42 and agrees
with Paimon's on inputs whose length is a multiple of 4 (a BinaryRow is a
multiple of 8). So the row is built as a hex string, `unhex`-ed once and hashed
by `hash()`: no row crosses into Python.

Where pypaimon 2.1's Python serializer differs from Java's BinaryRowWriter,
Java's rule is followed (Java engines write the same tables):
* a null non-compact DECIMAL (precision > 18) still reserves its 16 var bytes,
  a null non-compact TIMESTAMP its 8 (the slot holds `offset << 32`);
* a non-compact decimal's bytes are `BigInteger.toByteArray()`'s minimal two's
  complement (pypaimon adds a byte for negative powers of two such as -2^63).
Neither can occur in a primary key (its columns are NOT NULL; the decimal case
needs exactly -2^(8k-1)).
"""

from __future__ import annotations

from ..errors import ConfigurationError
from ..paimon.files.keyhash import HEADER_BYTES, MAX_KEY_FIELDS, KeyType, key_type  # noqa: F401

_MASK32 = 0xFFFFFFFF


# -- hex pieces: every helper returns a hex string Column of an exact byte length ----------

def _F():
    from pyspark.sql import functions as F
    return F


def _byte_hex(value):
    F = _F()
    return F.lpad(F.hex(value), 2, "0")


def _le4(u32):
    """Little-endian hex (8 chars) of a bigint holding an unsigned 32-bit value."""
    F = _F()
    swapped = (F.shiftleft(u32.bitwiseAND(0xFF), 24)
               .bitwiseOR(F.shiftleft(u32.bitwiseAND(0xFF00), 8))
               .bitwiseOR(F.shiftright(u32, 8).bitwiseAND(0xFF00))
               .bitwiseOR(F.shiftright(u32, 24).bitwiseAND(0xFF)))
    return F.lpad(F.hex(swapped), 8, "0")


def _le8(i64):
    """Little-endian hex (16 chars) of a bigint (two's complement)."""
    F = _F()
    return F.concat(_le4(i64.bitwiseAND(_MASK32)), _le4(F.shiftrightunsigned(i64, 32)))


def _zeros(nbytes):
    """Hex of `nbytes` zero bytes; `nbytes` an int or an int Column."""
    F = _F()
    if isinstance(nbytes, int):
        return F.lit("00" * nbytes)
    return F.repeat(F.lit("00"), nbytes)


def _round8(n):
    F = _F()
    return F.shiftleft(F.shiftright(n + 7, 3), 3)


# -- values ---------------------------------------------------------------------------------

def epoch_micros(col, ntz: bool):
    """Epoch microseconds of a TIMESTAMP (an instant) or TIMESTAMP_NTZ (wall clock read as UTC)."""
    F = _F()
    if ntz:
        return F.timestamp_diff("MICROSECOND", F.expr("TIMESTAMP_NTZ'1970-01-01 00:00:00'"), col)
    return F.unix_micros(col)


def _unscaled(col, t: KeyType):
    """The unscaled integer of a decimal as DECIMAL(38, 0), exactly (string surgery, no rounding)."""
    F = _F()
    # Spark prints decimals in plain notation with exactly `scale` digits after the point.
    text = col.cast(f"decimal({t.precision},{t.scale})").cast("string")
    return F.regexp_replace(text, r"\.", "").cast("decimal(38,0)")


def _fixed_slot(col, t: KeyType, micros=None):
    """Hex of the 8-byte slot of a fixed-size value (not null)."""
    F = _F()
    if t.kind == "bool":
        return F.concat(F.when(col, F.lit("01")).otherwise(F.lit("00")), _zeros(7))
    if t.kind == "i8":
        return F.concat(_byte_hex(col.cast("bigint").bitwiseAND(0xFF)), _zeros(7))
    if t.kind == "i16":
        v = col.cast("bigint")
        return F.concat(_byte_hex(v.bitwiseAND(0xFF)), _byte_hex(F.shiftright(v, 8).bitwiseAND(0xFF)), _zeros(6))
    if t.kind in ("i32", "date"):
        v = F.unix_date(col) if t.kind == "date" else col
        return F.concat(_le4(v.cast("bigint").bitwiseAND(_MASK32)), _zeros(4))
    if t.kind == "i64":
        return _le8(col.cast("bigint"))
    if t.kind == "f32":  # Java's floatToIntBits: raw IEEE bits, one canonical NaN
        bits = F.call_function("reflect", F.lit("java.lang.Float"), F.lit("floatToIntBits"), col.cast("float"))
        return F.concat(_le4(bits.cast("bigint").bitwiseAND(_MASK32)), _zeros(4))
    if t.kind == "f64":
        bits = F.call_function("reflect", F.lit("java.lang.Double"), F.lit("doubleToLongBits"), col.cast("double"))
        return _le8(bits.cast("bigint"))
    if t.kind == "dec":  # compact: the unscaled value as a long
        return _le8(_unscaled(col, t).cast("bigint"))
    if t.kind == "ts":  # compact: epoch milliseconds
        return _le8(_split_micros(micros)[0])
    raise AssertionError(t)


def _split_micros(micros):
    """(epoch millis floored, nano-of-millisecond) of epoch microseconds, as Paimon's Timestamp."""
    F = _F()
    sub = F.pmod(micros, F.lit(1000))
    millis = F.call_function("div", micros - sub, F.lit(1000))
    return millis.cast("bigint"), (sub * 1000).cast("bigint")


def _decimal_var_hex(col, t: KeyType):
    """(length, hex of 16 bytes): BigInteger.toByteArray() of the unscaled value, zero-padded."""
    F = _F()
    x = _unscaled(col, t)
    negative = x < 0
    # Two's complement of x < 0 is the bitwise NOT of -x-1 >= 0: work on y >= 0, no overflow.
    y = F.when(negative, -x - 1).otherwise(x).cast("decimal(38,0)")
    two32 = F.lit(4294967296).cast("decimal(11,0)")
    limbs, rest = [], y
    for _ in range(4):
        limb = F.pmod(rest, two32)
        limbs.append(F.when(negative, F.lit(_MASK32) - limb.cast("bigint")).otherwise(limb.cast("bigint")))
        rest = ((rest - limb) / two32).cast("decimal(38,0)")  # exact: rest - limb divides
    be16 = F.concat(*[F.lpad(F.hex(limb), 8, "0") for limb in reversed(limbs)])
    from decimal import Decimal
    length = F.lit(16)
    for k in range(15, 0, -1):  # smallest k with y < 2^(8k-1)
        length = F.when(y < F.lit(Decimal(1 << (8 * k - 1))), F.lit(k)).otherwise(length)
    minimal = F.call_function("substring", be16, F.lit(33) - length * 2, length * 2)
    return length.cast("bigint"), F.rpad(minimal, 32, "0")


def bucket_hash(columns, types, ntz_flags=None):
    """Spark Column (int): Paimon's BinaryRow hash of the row of `columns` with Paimon `types`.

    `ntz_flags[i]`: column i is a Spark TIMESTAMP_NTZ (else TIMESTAMP) when its type is a timestamp.
    """
    F = _F()
    if not columns:
        raise ConfigurationError("a bucket key needs at least one column")
    if len(columns) > MAX_KEY_FIELDS:
        raise ConfigurationError(f"a bucket key of {len(columns)} columns is not supported (at most {MAX_KEY_FIELDS}).")
    ntz_flags = ntz_flags or [False] * len(columns)
    header = F.lit(0).cast("bigint")
    slots, var_parts = [], []
    offset = F.lit(HEADER_BYTES + 8 * len(columns)).cast("bigint")  # where the next var bytes go
    for i, (col, t, ntz) in enumerate(zip(columns, types, ntz_flags)):
        is_null = col.isNull()
        header = header.bitwiseOR(F.when(is_null, F.lit(1 << (8 + i))).otherwise(F.lit(0)).cast("bigint"))
        var = None
        if t.kind in ("str", "bin"):
            raw = F.encode(col, "UTF-8") if t.kind == "str" else col.cast("binary")
            data = F.hex(raw)
            length = F.octet_length(raw).cast("bigint")
            short = is_null | (length <= 7)
            inline = F.concat(data, _zeros(F.greatest(F.lit(0), 7 - length)), _byte_hex(length + 128))
            pointer = F.concat(_le4(length), _le4(offset))
            slot = F.when(is_null, _zeros(8)).when(length <= 7, inline).otherwise(pointer)
            var = F.when(short, F.lit("")).otherwise(F.concat(data, _zeros(_round8(length) - length)))
            var_len = F.when(short, F.lit(0).cast("bigint")).otherwise(_round8(length))
        elif t.kind == "dec" and not t.compact:
            length, var_hex = _decimal_var_hex(col, t)
            slot = F.concat(F.when(is_null, _zeros(4)).otherwise(_le4(length)), _le4(offset))
            var = F.when(is_null, _zeros(16)).otherwise(var_hex)
            var_len = F.lit(16).cast("bigint")
        elif t.kind == "ts" and not t.compact:
            millis, nanos = _split_micros(epoch_micros(col, ntz))
            slot = F.concat(F.when(is_null, _zeros(4)).otherwise(_le4(nanos)), _le4(offset))
            var = F.when(is_null, _zeros(8)).otherwise(_le8(millis))
            var_len = F.lit(8).cast("bigint")
        else:
            micros = epoch_micros(col, ntz) if t.kind == "ts" else None
            slot = F.when(is_null, _zeros(8)).otherwise(_fixed_slot(col, t, micros))
        slots.append(slot)
        if var is not None:
            var_parts.append(var)
            offset = offset + var_len
    return F.hash(F.unhex(F.concat(_le8(header), *slots, *var_parts)))


def bucket_of(hash_col, num_buckets: int):
    """abs(hash % n) with Java's truncating remainder, as Paimon's DefaultBucketFunction."""
    F = _F()
    return F.abs(hash_col % F.lit(num_buckets)).cast("int")


# -- fixed-width keys: the Murmur3 words computed as numbers, no hex strings -------------------

_FIXED_WORDS = ("bool", "i8", "i16", "i32", "date", "i64")
_C1, _C2, _FMIX1, _FMIX2 = 0xCC9E2D51, 0x1B873593, 0x85EBCA6B, 0xC2B2AE35


def _fixed_words(t: KeyType) -> bool:
    return t.kind in _FIXED_WORDS or (t.kind == "ts" and t.compact)


def _mul32(a: str, c: int) -> str:
    """SQL: (a * c) mod 2^32 for 0 <= a < 2^32, in 16-bit halves: a bigint product never overflows."""
    return f"((({a} & 65535) * {c} + shiftleft(((shiftright({a}, 16) * {c}) & 65535), 16)) & {_MASK32})"


def _rotl32(x: str, r: int) -> str:
    return f"((shiftleft({x}, {r}) | shiftright({x}, {32 - r})) & {_MASK32})"


def _micros_sql(column: str, ntz: bool) -> str:
    """SQL: epoch microseconds of a TIMESTAMP or TIMESTAMP_NTZ (as `epoch_micros`)."""
    if ntz:
        return f"timestampdiff(MICROSECOND, TIMESTAMP_NTZ'1970-01-01 00:00:00', {column})"
    return f"unix_micros({column})"


def _slot_words(column: str, t: KeyType, ntz: bool) -> tuple[str, str]:
    """SQL (bigint): the two little-endian 32-bit words of the 8-byte slot of a fixed-size value (not null)."""
    if t.kind == "bool":
        return f"CASE WHEN {column} THEN 1L ELSE 0L END", "0L"
    if t.kind in ("i8", "i16", "i32", "date"):
        v = f"unix_date({column})" if t.kind == "date" else column
        mask = {"i8": 0xFF, "i16": 0xFFFF}.get(t.kind, _MASK32)
        return f"(CAST({v} AS BIGINT) & {mask})", "0L"
    if t.kind == "i64":
        v = f"CAST({column} AS BIGINT)"
    else:  # a compact timestamp: epoch milliseconds, floored (Paimon's Timestamp)
        micros = _micros_sql(column, ntz)
        v = f"CAST((({micros}) - pmod({micros}, 1000)) div 1000 AS BIGINT)"
    return f"({v} & {_MASK32})", f"shiftrightunsigned({v}, 32)"


_INLINE = 16  # copies of the running hash one projection may hold (steps inlined into each other)


def _mix_py(h: int, word: int) -> int:
    """One Murmur3 round in Python: the running hash after `word` (both unsigned 32-bit)."""
    def mul(a, c):
        return (a * c) & _MASK32

    def rotl(x, r):
        return ((x << r) | (x >> (32 - r))) & _MASK32

    return (rotl(h ^ mul(rotl(mul(word, _C1), 15), _C2), 13) * 5 + 0xE6546B64) & _MASK32


def _spark_hash_int(value: int) -> int:
    """Spark's `hash()` of an INT (Murmur3, seed 42): what its hash partitioning takes modulo
    the number of partitions."""
    h = _mix_py(42, value & _MASK32) ^ 4
    h ^= h >> 16
    h = (h * _FMIX1) & _MASK32
    h ^= h >> 13
    h = (h * _FMIX2) & _MASK32
    h ^= h >> 16
    return h - (1 << 32) if h >= 1 << 31 else h


def task_keys(num_buckets: int, tasks: int) -> list[int]:
    """Per bucket, an int that Spark's hash partitioning into `tasks` partitions sends to
    partition `bucket % tasks`: shuffling by it spreads the buckets evenly over the tasks, each
    bucket in one task. (Shuffling by the bucket itself hashes eight buckets onto two tasks as
    unevenly as 6/2, and lets adaptive execution coalesce a small micro-batch into one task.)"""
    owners: dict[int, int] = {}
    value = 0
    while len(owners) < tasks:
        owners.setdefault(_spark_hash_int(value) % tasks, value)  # Python's % is Spark's pmod here
        value += 1
    return [owners[b % tasks] for b in range(num_buckets)]


def _with_fixed_bucket(df, key_names, types, ntz_flags, num_buckets: int, name: str, not_null: bool = False):
    """`df` with column `name` = the bucket of a key of fixed-width fields only.

    Murmur3 (seed 42) over the BinaryRow's words as bigint arithmetic. The k1 of each word does
    not depend on the running hash: all in one projection. Each later step reads the running
    hash two to four times, so inlining steps multiplies the expression: steps are inlined into
    each other up to `_INLINE` copies, then projected (Spark keeps such projections apart: it
    does not inline an expression used twice). All SQL text: one call into the JVM per
    projection, which a stream pays every micro-batch.

    `not_null`: the key's columns hold no nulls (primary keys: a null fails the write), so the
    header's two words are zero and their rounds are done here, in Python.
    """
    from .sqltext import columns, ident

    kept = columns(df.columns)
    header, words = [], []
    for i, (key, t, ntz) in enumerate(zip(key_names, types, ntz_flags)):
        column = ident(key)
        header.append(f"CASE WHEN {column} IS NULL THEN shiftleft(1L, {8 + i}) ELSE 0L END")
        words += [w if not_null else f"CASE WHEN {column} IS NULL THEN 0L ELSE {w} END"
                  for w in _slot_words(column, t, ntz)]
    header_sql = "(" + " | ".join(header) + ")"
    total_words = len(words) + 2
    if not_null:  # the header's words are zero: their rounds are constants
        start = f"{_mix_py(_mix_py(42, 0), 0)}L"
    else:
        words = [f"({header_sql} & {_MASK32})", f"shiftrightunsigned({header_sql}, 32)"] + words
        start = "42L"
    word_names = [f"{name}_k{i}" for i in range(len(words))]
    out = df.selectExpr(*kept, *[f"{_mul32(_rotl32(_mul32(f'({w})', _C1), 15), _C2)} AS {n}"
                                 for w, n in zip(words, word_names)])

    def mix(k1):
        return lambda h: f"({_rotl32(f'({h} ^ {k1})', 13)} * 5 + {0xE6546B64}) & {_MASK32}"

    def fmix(constant, shift):
        return lambda h: f"{_mul32(h, constant)} ^ shiftright({_mul32(h, constant)}, {shift})"

    def signed_bucket(h):
        signed = f"CASE WHEN {h} >= {1 << 31} THEN {h} - {1 << 32} ELSE {h} END"
        if num_buckets is None:  # the hash itself (dynamic buckets)
            return f"CAST({signed} AS INT)"
        return f"CAST(abs(({signed}) % {num_buckets}) AS INT)"

    # (step, copies of the running hash it holds, the word it reads)
    steps = [(mix(k1), 2, i) for i, k1 in enumerate(word_names)]
    steps += [(lambda h: f"({h} ^ {4 * total_words}) ^ shiftright(({h} ^ {4 * total_words}), 16)", 2, None),
              (fmix(_FMIX1, 13), 4, None), (fmix(_FMIX2, 16), 4, None), (signed_bucket, 3, None)]
    h, copies = start, 1
    for number, (step, uses, _word) in enumerate(steps):
        if copies * uses > _INLINE:
            later = [word_names[i] for _, _, i in steps[number:] if i is not None]
            out = out.selectExpr(*kept, *later, f"{h} AS {name}")
            h, copies = name, 1
        h, copies = step(f"({h})"), copies * uses
    return out.selectExpr(*kept, f"{h} AS {name}")


def with_bucket(df, key_names, paimon_fields, num_buckets: int, name: str, not_null: bool = False):
    """`df` with an int column `name`: each row's bucket for the bucket key `key_names`
    (`not_null`: those columns hold no nulls, e.g. a primary key's, which a write refuses).

    Keys of fixed-width fields (integers, booleans, dates, timestamps up to millis) hash their
    words as numbers (2-3x faster); other keys build the BinaryRow as hex (`bucket_column`).
    """
    from pyspark.sql.types import TimestampNTZType
    by_name = {f.name: f for f in paimon_fields}
    types = [key_type(by_name[k].type) for k in key_names]
    ntz = [isinstance(df.schema[k].dataType, TimestampNTZType) for k in key_names]
    if 0 < len(key_names) <= MAX_KEY_FIELDS and all(_fixed_words(t) for t in types):
        return _with_fixed_bucket(df, key_names, types, ntz, num_buckets, name, not_null)
    return df.withColumn(name, bucket_column(df, key_names, paimon_fields, num_buckets))


def with_key_hash(df, key_names, paimon_fields, name: str, not_null: bool = False):
    """`df` with an int column `name`: Paimon's `BinaryRow.hashCode()` of each row's `key_names`
    (a dynamic-bucket table's key hash, as `paimon.files.keyhash.key_hashes` computes it)."""
    from pyspark.sql.types import TimestampNTZType
    by_name = {f.name: f for f in paimon_fields}
    types = [key_type(by_name[k].type) for k in key_names]
    ntz = [isinstance(df.schema[k].dataType, TimestampNTZType) for k in key_names]
    if 0 < len(key_names) <= MAX_KEY_FIELDS and all(_fixed_words(t) for t in types):
        return _with_fixed_bucket(df, key_names, types, ntz, None, name, not_null)
    return df.withColumn(name, bucket_hash([df[k] for k in key_names], types, ntz))


def bucket_column(df, key_names, paimon_fields, num_buckets: int):
    """The bucket (int Column) of each row of `df` for the bucket key `key_names`."""
    from pyspark.sql.types import TimestampNTZType
    by_name = {f.name: f for f in paimon_fields}
    types = [key_type(by_name[name].type) for name in key_names]
    ntz = [isinstance(df.schema[name].dataType, TimestampNTZType) for name in key_names]
    return bucket_of(bucket_hash([df[name] for name in key_names], types, ntz), num_buckets)
