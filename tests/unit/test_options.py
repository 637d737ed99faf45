"""Write-option parsing: lakesink's own keys, Paimon pass-through, and clear errors."""

from __future__ import annotations

import pytest

from lakesink.errors import ConfigurationError, InvalidOptionError, UnknownOptionError
from lakesink.options import MAX_COMMIT_IDENTIFIER, WriteOptions


def test_defaults_are_append_friendly():
    opts = WriteOptions.parse({})
    assert opts.partition_keys == [] and opts.table_options == {}
    assert opts.commit_user is None and opts.commit_identifier is None
    assert not opts.dynamic_overwrite and opts.commit_mode == "sync"


def test_lakesink_options_are_parsed_into_typed_fields():
    opts = WriteOptions.parse({
        "partition": " dt , region ", "commit.user": " nightly ", "commit.identifier": "42",
        "partitionOverwriteMode": "DYNAMIC", "commit.mode": "pipelined",
        "commit.empty-batches": "true", "maintenance.enabled": "no",
    })
    assert opts.partition_keys == ["dt", "region"]
    assert opts.commit_user == "nightly" and opts.commit_identifier == 42
    assert opts.dynamic_overwrite and opts.commit_mode == "pipelined"
    assert opts.commit_empty_batches and not opts.maintenance


def test_lakesink_option_keys_are_case_insensitive_like_spark_options():
    # Spark lower-cases the keys of options given to a Python data source.
    opts = WriteOptions.parse({"partitionoverwritemode": "dynamic", "COMMIT.USER": "u",
                               "commit.identifier": 1, "checkpointlocation": "/chk"})
    assert opts.dynamic_overwrite and opts.commit_user == "u" and opts.commit_identifier == 1


def test_paimon_table_options_pass_through_by_their_paimon_names():
    opts = WriteOptions.parse({"target-file-size": "64 mb", "file.compression": "zstd",
                               "snapshot.num-retained.max": "10", "bucket": "-1"})
    assert opts.table_options == {"target-file-size": "64 mb", "file.compression": "zstd",
                                  "snapshot.num-retained.max": "10", "bucket": "-1"}


def test_paimons_dynamic_partition_overwrite_key_also_selects_dynamic_overwrite():
    assert WriteOptions.parse({"dynamic-partition-overwrite": "true"}).dynamic_overwrite
    assert not WriteOptions.parse({"dynamic-partition-overwrite": "false"}).dynamic_overwrite


def test_options_spark_adds_by_itself_are_accepted():
    opts = WriteOptions.parse({"path": "/wh/db.db/t", "queryname": "q", "__partition_columns": "[]"})
    assert opts.path == "/wh/db.db/t" and opts.query_name == "q"


def test_none_values_are_ignored():
    assert WriteOptions.parse({"commit.user": None, "partition": None}).commit_user is None


@pytest.mark.parametrize("key, meant", [
    ("commit_user", "commit.user"),
    ("comit.user", "commit.user"),
    ("target_file_size", "target-file-size"),
    ("snapshot.num-retained.mx", "snapshot.num-retained.max"),
    ("partitionOverwriteMod", "partitionOverwriteMode"),
])
def test_an_unknown_option_is_an_error_naming_the_key_and_what_was_meant(key, meant):
    with pytest.raises(UnknownOptionError) as info:
        WriteOptions.parse({key: "1"})
    message = str(info.value)
    assert f"Unknown option {key!r}" in message
    assert "Did you mean" in message and repr(meant) in message
    assert info.value.key == key


def test_an_unknown_option_without_a_near_match_still_says_where_options_are_listed():
    with pytest.raises(UnknownOptionError, match="'frobnicate'.*docs/options.md") as info:
        WriteOptions.parse({"frobnicate": "yes"})
    assert "Did you mean" not in str(info.value)


def test_an_unknown_option_is_a_configuration_error_and_a_value_error():
    with pytest.raises(ConfigurationError):
        WriteOptions.parse({"nope": "1"})
    with pytest.raises(ValueError):
        WriteOptions.parse({"nope": "1"})


@pytest.mark.parametrize("key, value, expected", [
    ("commit.identifier", "seven", "an integer"),
    ("commit.identifier", "1.5", "an integer"),
    ("commit.identifier", "-1", "an integer >= 0"),
    ("commit.identifier", str(MAX_COMMIT_IDENTIFIER + 1), f"an integer <= {MAX_COMMIT_IDENTIFIER}"),
    ("commit.mode", "fast", "one of sync, pipelined"),
    ("partitionOverwriteMode", "sometimes", "one of static, dynamic"),
    ("commit.empty-batches", "maybe", "true or false"),
    ("maintenance.enabled", "2", "true or false"),
    ("dynamic-partition-overwrite", "yep", "true or false"),
    ("commit.user", "   ", "a non-empty string"),
])
def test_a_malformed_value_is_an_error_naming_the_key_the_value_and_what_is_expected(key, value, expected):
    with pytest.raises(InvalidOptionError) as info:
        WriteOptions.parse({key: value, "commit.user": "u"} if key == "commit.identifier" else {key: value})
    message = str(info.value)
    assert repr(key) in message and repr(value) in message and expected in message
    assert (info.value.key, info.value.value) == (key, value)


def test_commit_identifier_without_commit_user_is_an_error():
    with pytest.raises(InvalidOptionError, match="together with commit.user"):
        WriteOptions.parse({"commit.identifier": "3"})


def test_the_largest_identifier_below_paimons_batch_identifier_is_accepted():
    opts = WriteOptions.parse({"commit.user": "u", "commit.identifier": str(MAX_COMMIT_IDENTIFIER)})
    assert opts.commit_identifier == MAX_COMMIT_IDENTIFIER


# -- names users bring from Delta and Spark ------------------------------------------------

def test_deltas_time_travel_names_are_paimons_snapshot_and_timestamp_options_for_batch_reads():
    from lakesink.options import parse
    assert parse({"versionAsOf": "3"}, ("read",)) == {"scan.snapshot-id": 3}
    assert parse({"versionasof": 3}, ("read",)) == {"scan.snapshot-id": 3}  # as Spark passes it
    assert parse({"timestampAsOf": "1714564800000"}, ("read",)) == {"scan.timestamp-millis": 1714564800000}
    for text in ("2024-05-01T12:00:00+00:00", "2024-05-01T14:00:00+02:00", "2024-05-01 12:00:00",
                 "2024-05-01T12:00:00Z"):
        assert parse({"timestampAsOf": text}, ("read",)) == {"scan.timestamp-millis": 1714564800000}, text


def test_a_malformed_time_names_the_option_as_the_user_spelled_it():
    from lakesink.options import parse
    with pytest.raises(InvalidOptionError, match="'timestampAsOf' has invalid value 'yesterday'.*ISO-8601"):
        parse({"timestampAsOf": "yesterday"}, ("read",))
    with pytest.raises(InvalidOptionError, match="'versionAsOf'.*an integer >= 1"):
        parse({"versionAsOf": "0"}, ("read",))


def test_two_spellings_of_one_option_must_agree():
    from lakesink.options import parse
    assert parse({"versionAsOf": "3", "scan.snapshot-id": "3"}, ("read",)) == {"scan.snapshot-id": 3}
    with pytest.raises(InvalidOptionError, match="both name scan.snapshot-id"):
        parse({"versionAsOf": "3", "scan.snapshot-id": "4"}, ("read",))


@pytest.mark.parametrize("key", ["maxFilesPerTrigger", "maxfilespertrigger", "read.stream.maxFilesPerTrigger",
                                 "maxBytesPerTrigger"])
def test_a_file_or_byte_rate_limit_is_refused_with_a_pointer_to_the_row_limit(key):
    from lakesink.errors import UnsupportedOptionError
    from lakesink.options import parse
    with pytest.raises(UnsupportedOptionError, match="read.stream.maxRowsPerTrigger") as info:
        parse({key: "10"}, ("stream-read",))
    assert info.value.option == key and isinstance(info.value, ConfigurationError)
    assert parse({"maxRowsPerTrigger": "10"}, ("stream-read",)) == {"read.stream.maxRowsPerTrigger": 10}


def test_batch_time_travel_names_are_refused_on_a_stream_with_its_own_options_named():
    from lakesink.errors import UnsupportedOptionError
    from lakesink.options import parse
    with pytest.raises(UnsupportedOptionError, match="scan.mode=from-snapshot"):
        parse({"versionAsOf": "3"}, ("stream-read",))
    with pytest.raises(UnsupportedOptionError, match="scan.mode=from-timestamp"):
        parse({"timestampAsOf": "2024-05-01"}, ("stream-read",))
    assert parse({"scan.snapshot-id": "3"}, ("stream-read",)) == {"scan.snapshot-id": 3}


def test_the_streaming_reader_refuses_max_files_per_trigger_before_reading(tmp_path):
    from lakesink.errors import UnsupportedOptionError
    from lakesink.spark.stream_reader import PaimonStreamReader
    with pytest.raises(UnsupportedOptionError, match="maxRowsPerTrigger"):
        PaimonStreamReader(str(tmp_path / "t"), {"maxfilespertrigger": "5"}, None)


def test_storage_options_for_the_cli_take_only_storage_keys():
    from lakesink.options import parse_storage
    assert parse_storage({"fs.s3.accesskeyid": "k", "s3.endpoint": "http://x", "commit.lock": "file:/l"}) == {
        "fs.s3.accessKeyId": "k", "s3.endpoint": "http://x", "commit.lock": "file:/l"}
    with pytest.raises(ConfigurationError, match="'bucket' is not a storage option") as info:
        parse_storage({"bucket": "4"})
    assert info.value.option == "bucket"
    with pytest.raises(InvalidOptionError, match="commit.allow-unsafe-publication"):
        parse_storage({"commit.allow-unsafe-publication": "perhaps"})


# -- commit identity -----------------------------------------------------------------------

def test_a_write_whose_identifier_is_at_or_below_the_last_committed_is_skipped_and_logged(table_path, caplog):
    import pyarrow as pa

    from lakesink.paimon.write.batch import BatchWrite
    from tests.unit.test_maintenance import SCHEMA, Writer

    writer = Writer(table_path, user="nightly")
    for _ in range(3):
        writer.commit()  # identifiers 0, 1, 2

    def job(identifier):
        opts = WriteOptions.parse({"commit.user": "nightly", "commit.identifier": str(identifier)})
        return BatchWrite.plan(table_path, pa.schema(SCHEMA), opts, "append", "test")

    with caplog.at_level("WARNING", logger="lakesink"):
        assert job(1).already_committed() and job(2).already_committed()
        assert not job(3).already_committed()
    skipped = [r.getMessage() for r in caplog.records if "skipped as a replay" in r.getMessage()]
    assert len(skipped) == 2 and all(r.levelname == "WARNING" for r in caplog.records if "replay" in r.getMessage())
    assert "'nightly' has already committed identifier 2 (this write's is 1" in skipped[0]
