"""Where the Delta table lives: a local directory or an S3 URI, and what delta-rs is told about it.

A table is either a local directory (a path) or an object in an S3-compatible store,
``s3://bucket/path`` (``s3a://`` is taken as a synonym). delta-rs reaches the store through
its object store (Rust's ``object_store`` crate), configured by *storage options* and by the
usual AWS environment variables, which it reads itself: ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``, ``AWS_ENDPOINT_URL`` (an
S3-compatible server), ``AWS_ALLOW_HTTP`` (``true`` for a plain-http endpoint). A storage
option of the same name, in any case (``AWS_REGION`` or ``aws_region``), wins over the
variable.

**Commits are conditional writes.** A Delta commit creates the log file of the next version,
``_delta_log/<version:020>.json``, and must fail when another writer created it first (Delta
protocol, "Delta Log Entries": mutual exclusion on the commit file). delta-rs (>= 0.23, and so
the ``deltalake`` >= 1.1 moonish needs) commits on S3 with a ``PUT`` carrying
``If-None-Match: *`` (S3 conditional writes, supported by AWS S3 since 2024, MinIO, R2, moto):
the loser gets ``412 Precondition Failed``, reloads the log and retries at the next version
(or fails on a real conflict). :func:`table_options` sets ``aws_conditional_put = etag`` (the
object store's setting for those headers, its default too) so that the choice is explicit,
and refuses every setting that would commit any other way: ``AWS_S3_ALLOW_UNSAFE_RENAME``
(a plain overwrite: two writers of one version both "succeed", one commit is lost),
``conditional_put`` other than ``etag``, and ``copy_if_not_exists`` (another mechanism,
untested here). A store that ignores the headers would make commits unsafe; every store named
above honours them.

:func:`storage_errors` turns the object store's failures into moonish's kinds: a bucket that
does not exist or refused credentials are :class:`InvalidArgumentError` (fix the call), an
endpoint that cannot be reached or answers 5xx is :class:`UnavailableError` (retry later).

This module imports no third-party package.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from urllib.parse import urlsplit

from moonish.errors import InvalidArgumentError, MoonishError, UnavailableError

OBJECT_STORE_SCHEMES = ("s3", "s3a")
"""The URI schemes of a table in an object store (S3 and S3-compatible servers)."""

CONDITIONAL_PUT = "aws_conditional_put"
"""The object store's conditional-put setting; moonish sets it to :data:`ETAG`."""
ETAG = "etag"
"""``If-None-Match`` / ``If-Match`` headers: S3 conditional writes."""
UNSAFE_RENAME = "aws_s3_allow_unsafe_rename"
"""delta-rs's opt-out of safe commits, refused."""
_CONDITIONAL_PUT_KEYS = (CONDITIONAL_PUT, "conditional_put")
_COPY_KEYS = ("aws_copy_if_not_exists", "copy_if_not_exists")
_UNSAFE_KEYS = (UNSAFE_RENAME, "allow_unsafe_rename")
_TRUE = ("1", "true", "yes", "on")


def is_object_store(table: str) -> bool:
    """Whether ``table`` is an object store URI (``s3://...``) rather than a local path."""
    return urlsplit(table).scheme.lower() in OBJECT_STORE_SCHEMES


def parse_options(pairs: Sequence[str]) -> dict[str, str]:
    """Storage options from ``KEY=VALUE`` texts (the CLI's ``--storage-option``); a later
    pair of the same key (any case) wins.

    Raises:
        InvalidArgumentError: a text without ``=`` or with an empty key.
    """
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidArgumentError(f"a storage option is KEY=VALUE, not {pair!r}")
        for known in [k for k in options if k.lower() == key.strip().lower()]:
            del options[known]
        options[key.strip()] = value
    return options


def table_uri(table: str) -> str:
    """The table's location as delta-rs takes it: an ``s3://bucket/path`` URI unchanged but
    for a trailing ``/``, a local path made absolute.

    Raises:
        InvalidArgumentError: a URI of another scheme (``gs://``, ``http://``, ...), or an S3
            URI without a bucket.
    """
    parts = urlsplit(table)
    scheme = parts.scheme.lower()
    if scheme in OBJECT_STORE_SCHEMES:
        if not parts.netloc:
            raise InvalidArgumentError(
                f"an S3 table is s3://<bucket>/<path>, not {table!r}: no bucket", path=table
            )
        return table.rstrip("/")
    if len(scheme) > 1 and "://" in table:  # "C:\\..." is a path
        raise InvalidArgumentError(
            f"a table is a local directory or s3://<bucket>/<path>; {scheme}:// is not supported",
            path=table,
        )
    return os.path.abspath(table)


def table_options(table: str, storage_options: Mapping[str, str] | None) -> dict[str, str]:
    """delta-rs's storage options for ``table``: for an S3 URI, ``storage_options`` plus
    ``aws_conditional_put = etag`` (the environment's AWS variables are read by delta-rs);
    for a local directory, none.

    Raises:
        InvalidArgumentError: storage options given for a local directory; or a setting, in
            ``storage_options`` or the environment, that commits without S3 conditional
            writes (``AWS_S3_ALLOW_UNSAFE_RENAME`` true, ``conditional_put`` other than
            ``etag``, ``copy_if_not_exists``).
    """
    given = dict(storage_options or {})
    if not is_object_store(table):
        if given:
            raise InvalidArgumentError(
                f"storage options ({', '.join(sorted(given))}) are for s3:// tables, not a "
                "local directory",
                path=table,
            )
        return {}
    lowered = {key.lower(): value for key, value in given.items()}
    environment = {key.lower(): value for key, value in os.environ.items()}
    for key in _UNSAFE_KEYS:
        value = lowered.get(key, environment.get(key, ""))
        if value.strip().lower() in _TRUE:
            raise InvalidArgumentError(
                f"{key.upper()} is set: moonish commits to S3 only with conditional writes "
                "(If-None-Match), never by an unsafe rename that lets two writers overwrite "
                "one commit; unset it",
                path=table,
            )
    for key in _COPY_KEYS:
        if key in lowered or key in environment:
            raise InvalidArgumentError(
                f"{key.upper()} is set: moonish commits to S3 with conditional writes "
                f"({CONDITIONAL_PUT} = {ETAG}), not copy-if-not-exists; unset it",
                path=table,
            )
    for key in _CONDITIONAL_PUT_KEYS:
        setting = lowered.get(key, environment.get(key))
        if setting is not None and setting.strip().lower() != ETAG:
            raise InvalidArgumentError(
                f"{key.upper()} = {setting!r}: moonish commits to S3 only with conditional "
                f"writes ({CONDITIONAL_PUT} = {ETAG})",
                path=table,
            )
    if not any(key in lowered for key in _CONDITIONAL_PUT_KEYS):
        given[CONDITIONAL_PUT] = ETAG
    return given


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_MISSING_BUCKET = ("NoSuchBucket",)
_REFUSED = (
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "AccessDenied",
    "ExpiredToken",
    "InvalidToken",
    "403 Forbidden",
)
_UNREACHABLE = (
    "error sending request",
    "client error (Connect)",
    "dns error",
    "timed out",
    "operation timed out",
    "500 Internal Server Error",
    "502 Bad Gateway",
    "503 Service Unavailable",
    "504 Gateway Timeout",
)


def _detail(error: BaseException) -> str:
    """delta-rs's message on one line, without its terminal colours, at most 300 chars."""
    text = " ".join(_ANSI.sub("", str(error)).replace("↳", " ").split())
    return text if len(text) <= 300 else text[:297] + "..."


def _endpoint(options: Mapping[str, str]) -> str:
    lowered = {key.lower(): value for key, value in options.items()}
    for key in ("aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint"):
        if key in lowered:
            return lowered[key]
    return os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT") or "AWS S3"


@contextmanager
def storage_errors(table: str, options: Mapping[str, str]) -> Iterator[None]:
    """Raise the object store's failures inside the block as moonish errors naming the
    table and the endpoint; errors of a local table, and ones it cannot classify, pass
    unchanged.

    Raises:
        InvalidArgumentError: the bucket does not exist, or the store refused the credentials
            (403: a wrong key, a bad signature, no permission).
        UnavailableError: the endpoint cannot be reached (connection refused, DNS, timeout)
            or answered with a server error (5xx), after delta-rs's own retries.
    """
    try:
        yield
    except Exception as error:  # delta-rs raises OSError, DeltaError and others
        if not is_object_store(table) or isinstance(error, MoonishError):
            raise
        text = str(error)
        endpoint = _endpoint(options)
        if any(mark in text for mark in _MISSING_BUCKET):
            bucket = urlsplit(table).netloc
            raise InvalidArgumentError(
                f"no bucket {bucket!r} at {endpoint} (create it first; delta-rs: {_detail(error)})",
                path=table,
            ) from error
        if any(mark in text for mark in _REFUSED):
            raise InvalidArgumentError(
                f"{endpoint} refused the credentials (AWS_ACCESS_KEY_ID, "
                f"AWS_SECRET_ACCESS_KEY or the storage options; delta-rs: {_detail(error)})",
                path=table,
            ) from error
        if any(mark in text for mark in _UNREACHABLE):
            raise UnavailableError(
                f"cannot reach the object store at {endpoint} (delta-rs: {_detail(error)})",
                path=table,
            ) from error
        raise
