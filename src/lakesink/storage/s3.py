"""S3 storage keys, declared once: the URL schemes of S3 stores, every spelling of each S3
setting (endpoint, credentials, region, path style; pypaimon's `fs.s3.` names first) with its
Hadoop S3A name, and the S3 client options lakesink reads itself (pypaimon has none for them).

Whoever reads an S3 setting from storage options (the boto3 client of snapshot publication,
Spark's S3A writer, the FileIO's client options) reads it here, so one place adds a spelling.
"""

from __future__ import annotations

from collections.abc import Mapping

S3_SCHEMES = ("s3", "s3a", "s3n")

# The prefixes of S3 storage keys, pypaimon's first: `fs.s3.endpoint`, `s3.endpoint`, `s3a.endpoint`
# and `fs.s3a.endpoint` name the same setting.
S3_PREFIXES = ("fs.s3.", "s3.", "s3a.", "fs.s3a.")

# Setting -> (the names after any prefix, the first found wins; Hadoop S3A's key for it).
S3_SETTINGS: dict[str, tuple[tuple[str, ...], str]] = {
    "endpoint": (("endpoint",), "fs.s3a.endpoint"),
    "access-key": (("accessKeyId", "access-key", "access.key"), "fs.s3a.access.key"),
    "secret-key": (("accessKeySecret", "secret-key", "secret.key"), "fs.s3a.secret.key"),
    "session-token": (("securityToken", "session-token", "session.token", "security-token", "security.token"),
                      "fs.s3a.session.token"),
    "region": (("region", "endpoint.region"), "fs.s3a.endpoint.region"),
    "path-style-access": (("path-style-access", "path.style.access"), "fs.s3a.path.style.access"),
}

# How long S3 clients wait and how often they try (declared in lakesink.options); every prefix counts.
S3_CONNECT_TIMEOUT = "fs.s3.connection.establish.timeout"
S3_REQUEST_TIMEOUT = "fs.s3.connection.request.timeout"
S3_ATTEMPTS = "fs.s3.attempts.maximum"


def s3_key(options: Mapping[str, str], *names: str) -> str | None:
    """The key of `options` that spells `names` (each after any of the S3 prefixes), the first
    name with pypaimon's prefix first; None when none is given."""
    for name in names:
        for prefix in S3_PREFIXES:
            if prefix + name in options:
                return prefix + name
    return None


def s3_setting(options: Mapping[str, str], setting: str) -> str | None:
    """The value of an S3 setting of `S3_SETTINGS` (`"endpoint"`, `"access-key"`, ...) among
    `options`, by any of its spellings; None when not given."""
    key = s3_key(options, *S3_SETTINGS[setting][0])
    return None if key is None else str(options[key])


def s3a_options(options: Mapping[str, str]) -> dict[str, str]:
    """The S3 settings among storage `options` as Hadoop S3A's per-write options: the same store,
    endpoint and credentials. Keys given select Hadoop's simple (or temporary) credentials
    provider, not the cluster's chain; an `http://` endpoint turns SSL off."""
    out = {}
    for setting, (_, hadoop_key) in S3_SETTINGS.items():
        value = s3_setting(options, setting)
        if value:
            out[hadoop_key] = value
    if "fs.s3a.access.key" in out:
        out["fs.s3a.aws.credentials.provider"] = (
            "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider" if "fs.s3a.session.token" in out
            else "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider")
    if out.get("fs.s3a.endpoint", "").startswith("http://"):
        out["fs.s3a.connection.ssl.enabled"] = "false"
    return out


def s3_client_options(options: Mapping[str, str]) -> dict[str, int]:
    """The S3 client options given among `options`, typed (timeouts in milliseconds), by their
    `fs.s3.` names. Parsed here, below the options registry that documents them, as it does:
    durations in Paimon's notation, attempts a whole number; 0 is refused (the clients read it
    as "give up at once", not as "never")."""
    from pypaimon.common.time_utils import parse_duration

    from ..errors import InvalidOptionError
    out = {}
    for key in (S3_CONNECT_TIMEOUT, S3_REQUEST_TIMEOUT, S3_ATTEMPTS):
        spelled = s3_key(options, key[len("fs.s3."):])
        if spelled is None:
            continue
        text = str(options[spelled]).strip()
        expected = "a whole number above 0" if key == S3_ATTEMPTS else "a duration above 0, such as '5 s'"
        try:
            out[key] = int(text) if key == S3_ATTEMPTS else int(parse_duration(text))
        except (TypeError, ValueError):
            raise InvalidOptionError(spelled, options[spelled], expected) from None
        if out[key] <= 0:
            raise InvalidOptionError(spelled, options[spelled], expected)
    return out
