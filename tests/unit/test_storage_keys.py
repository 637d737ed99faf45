"""S3 storage keys are read in one place: every spelling of a setting, for every reader of it."""

from __future__ import annotations

from lakesink import storage
from lakesink.spark.output import _s3a_options


def test_every_prefix_spells_the_same_setting_pypaimons_first():
    for prefix in ("fs.s3.", "s3.", "s3a.", "fs.s3a."):
        assert storage.s3_setting({prefix + "endpoint": "http://minio:9000"}, "endpoint") == "http://minio:9000"
    both = {"s3.accessKeyId": "second", "fs.s3.accessKeyId": "first"}
    assert storage.s3_setting(both, "access-key") == "first"
    assert storage.s3_setting({"s3.access-key": "a", "fs.s3a.secret.key": "b"}, "access-key") == "a"
    assert storage.s3_setting({"fs.s3a.endpoint.region": "eu-west-1"}, "region") == "eu-west-1"
    assert storage.s3_setting({"s3.security-token": "t"}, "session-token") == "t"
    assert storage.s3_setting({}, "endpoint") is None


def test_hadoop_s3a_options_map_every_setting_and_choose_the_credentials_provider():
    given = {"fs.s3.endpoint": "http://minio:9000", "s3.access-key": "id", "fs.s3.accessKeySecret": "secret",
             "s3.region": "us-east-1", "s3.path-style-access": "true"}
    assert storage.s3a_options(given) == {
        "fs.s3a.endpoint": "http://minio:9000", "fs.s3a.access.key": "id", "fs.s3a.secret.key": "secret",
        "fs.s3a.endpoint.region": "us-east-1", "fs.s3a.path.style.access": "true",
        "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "fs.s3a.connection.ssl.enabled": "false"}
    with_token = storage.s3a_options({"fs.s3.accessKeyId": "id", "fs.s3.securityToken": "token"})
    assert with_token["fs.s3a.aws.credentials.provider"].endswith("TemporaryAWSCredentialsProvider")
    assert storage.s3a_options({"fs.s3.endpoint": "", "fs.s3.region": "x"}) == {"fs.s3a.endpoint.region": "x"}


def test_sparks_writer_reads_the_keys_spark_lower_cased():
    # Spark hands a data source its options lower-cased; the camel-case keys are found again.
    assert _s3a_options({"fs.s3.accesskeyid": "id", "fs.s3.accesskeysecret": "secret"}) == {
        "fs.s3a.access.key": "id", "fs.s3a.secret.key": "secret",
        "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"}


def test_the_snapshot_publisher_reads_the_same_spellings():
    import botocore  # noqa: F401 - publication needs boto3 (lakesink[s3])

    from lakesink.paimon.table.publish import s3_client

    client = s3_client({"s3a.endpoint": "http://127.0.0.1:1", "fs.s3a.access.key": "id",
                        "s3.secret-key": "secret", "fs.s3a.endpoint.region": "eu-central-1",
                        "s3.path.style.access": "true"})
    assert client.meta.endpoint_url == "http://127.0.0.1:1"
    assert client.meta.region_name == "eu-central-1"
    assert client.meta.config.s3["addressing_style"] == "path"
    assert client._request_signer._credentials.access_key == "id"
    assert client._request_signer._credentials.secret_key == "secret"
