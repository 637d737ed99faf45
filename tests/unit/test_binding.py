"""A stream's checkpoint binding, one mechanism for the Paimon and JDBC sinks: today's documents
read as they are, another table or commit user refused, and a checkpoint on S3 reached with the
storage options alone (no credentials in the environment)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakesink.errors import BackgroundCommitError, CheckpointMismatchError, CorruptStateError
from lakesink.jdbc.options import JdbcOptions
from lakesink.jdbc.stream_sink import JdbcStreamSink
from lakesink.options import WriteOptions
from lakesink.paimon.write.stream import StreamSink
from lakesink.protocol import pipelined
from lakesink.protocol.binding import CheckpointBinding, sink_state
from lakesink.spark import committer_service as service

from ..s3server import s3_bucket

SCHEMA = pa.schema([("id", pa.int64())])


def test_a_binding_written_today_reads_and_another_table_or_user_is_refused(tmp_path):
    checkpoint = str(tmp_path / "chk")
    store = sink_state(checkpoint)
    # sink.json exactly as lakesink writes it today
    store.write_json("sink.json", {"format": "lakesink.stream-sink", "version": 1, "commit_user": "lakesink-stream-q1",
                                   "table": "/wh/db.db/t", "query_id": "q1"})
    binding = CheckpointBinding(store, checkpoint, "sink.json", "lakesink.stream-sink", "/wh/db.db/t")
    assert binding.commit_user(None) == "lakesink-stream-q1"
    assert binding.commit_user("lakesink-stream-q1") == "lakesink-stream-q1"
    with pytest.raises(CheckpointMismatchError, match="commit user 'lakesink-stream-q1'"):
        binding.commit_user("another")
    with pytest.raises(CheckpointMismatchError, match="belongs to table /wh/db.db/t, not /wh/db.db/u"):
        CheckpointBinding(store, checkpoint, "sink.json", "lakesink.stream-sink", "/wh/db.db/u").commit_user(None)
    with pytest.raises(CorruptStateError, match="unknown format"):  # the JDBC sink's format is another
        CheckpointBinding(store, checkpoint, "sink.json", "lakesink.jdbc-stream-sink", "/wh/db.db/t").commit_user(None)
    store.write_json("sink.json", {"format": "lakesink.stream-sink", "version": 2, "commit_user": "u",
                                   "table": "/wh/db.db/t", "query_id": None})
    with pytest.raises(CorruptStateError, match="sink.json is a .* of version 2; this lakesink .* reads version 1"):
        # a newer version is not guessed at
        binding.commit_user(None)


def test_binding_writes_the_same_document_with_the_query_ids_user(tmp_path):
    checkpoint = str(tmp_path / "chk")
    store = sink_state(checkpoint)
    binding = CheckpointBinding(store, checkpoint, "jdbc-sink.json", "lakesink.jdbc-stream-sink", "sqlite:///x/t")
    assert binding.commit_user(None) is None
    assert binding.bind(None, lambda: "q7") == "lakesink-stream-q7"
    assert store.read_json("jdbc-sink.json") == {"format": "lakesink.jdbc-stream-sink", "version": 1,
                                                 "commit_user": "lakesink-stream-q7", "table": "sqlite:///x/t",
                                                 "query_id": "q7"}
    assert binding.commit_user(None) == "lakesink-stream-q7"


def test_checkpoints_on_s3_with_credentials_only_in_the_options(tmp_path, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    with s3_bucket("lakesink-binding") as s3:
        fs = s3.fs_options()
        checkpoint = "s3://lakesink-binding/chk"

        paimon = StreamSink("s3://lakesink-binding/wh/db.db/t", checkpoint, SCHEMA,
                            WriteOptions.parse({**fs, "commit.user": "s3-user", "maintenance.enabled": "false"}),
                            "test")
        assert paimon.bind() == "s3-user"
        assert sink_state(checkpoint, fs).read_json("sink.json")["commit_user"] == "s3-user"
        service.await_commits(checkpoint, timeout=10, options=fs)  # reads the S3 state with the options
        pipelined.record_error(sink_state(checkpoint, fs), 4, RuntimeError("disk full"))
        with pytest.raises(BackgroundCommitError, match="disk full"):
            service.await_commits(checkpoint, timeout=10, options=fs)

        options = JdbcOptions.parse({"url": f"sqlite:///{tmp_path}/shop.db", "dbtable": "orders",
                                     "checkpointLocation": "s3://lakesink-binding/jdbc-chk",
                                     "commit.user": "jdbc-user", **{k.lower(): v for k, v in fs.items()}})
        from pyspark.sql.types import LongType, StructField, StructType  # types only: no Spark session
        spark_schema = StructType([StructField("id", LongType())])
        jdbc = JdbcStreamSink(options, spark_schema)
        assert jdbc.bind() == "jdbc-user"
        assert sink_state("s3://lakesink-binding/jdbc-chk", fs).read_json("jdbc-sink.json")["commit_user"] == \
            "jdbc-user"
        assert JdbcStreamSink(options, spark_schema).commit_user == "jdbc-user"  # a restart reads it back
