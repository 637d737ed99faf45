"""The S3 client options lakesink reads itself (pypaimon has none for them), by Hadoop S3A's names."""

from __future__ import annotations

from collections.abc import Mapping

# How long S3 clients wait and how often they try (declared in lakesink.options); pypaimon's
# spellings of the prefix (`fs.s3.`, `s3.`, `s3a.`, `fs.s3a.`) all count.
S3_CONNECT_TIMEOUT = "fs.s3.connection.establish.timeout"
S3_REQUEST_TIMEOUT = "fs.s3.connection.request.timeout"
S3_ATTEMPTS = "fs.s3.attempts.maximum"
_S3_PREFIXES = ("fs.s3.", "s3.", "s3a.", "fs.s3a.")


def s3_client_options(options: Mapping[str, str]) -> dict[str, int]:
    """The S3 client options given among `options`, typed (timeouts in milliseconds), by their
    `fs.s3.` names. Parsed here, below the options registry that documents them, as it does:
    durations in Paimon's notation, attempts a whole number; 0 is refused (the clients read it
    as "give up at once", not as "never")."""
    from pypaimon.common.time_utils import parse_duration

    from ..errors import InvalidOptionError
    out = {}
    for key in (S3_CONNECT_TIMEOUT, S3_REQUEST_TIMEOUT, S3_ATTEMPTS):
        name = key[len("fs.s3."):]
        spelled = next((prefix + name for prefix in _S3_PREFIXES if prefix + name in options), None)
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
