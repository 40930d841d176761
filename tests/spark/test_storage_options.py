"""Where a table lives and what delta-rs is told (moonish.spark.storage), without a store: an
s3:// table commits only by S3 conditional writes, whatever the options or the environment
say; storage options are for s3:// tables; other URI schemes are refused by name."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from moonish.errors import InvalidArgumentError
from moonish.spark.storage import (
    CONDITIONAL_PUT,
    ETAG,
    is_object_store,
    parse_options,
    table_options,
    table_uri,
)

TABLE = "s3://lake/tables/redis"


@pytest.fixture(autouse=True)
def no_aws_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment's commit settings are checked too: start from none."""
    for name in list(os.environ):
        if name.upper() in (
            "AWS_S3_ALLOW_UNSAFE_RENAME",
            "AWS_CONDITIONAL_PUT",
            "AWS_COPY_IF_NOT_EXISTS",
        ):
            monkeypatch.delenv(name)


def test_an_s3_table_commits_by_conditional_writes_unless_told_otherwise() -> None:
    given = {"AWS_REGION": "eu-west-1", "AWS_ENDPOINT_URL": "http://127.0.0.1:9000"}
    assert table_options(TABLE, given) == {**given, CONDITIONAL_PUT: ETAG}
    assert table_options(TABLE, None) == {CONDITIONAL_PUT: ETAG}
    assert table_options(TABLE, {"conditional_put": " ETag "}) == {"conditional_put": " ETag "}
    assert table_options(TABLE, {"AWS_S3_ALLOW_UNSAFE_RENAME": "false"})[CONDITIONAL_PUT] == ETAG


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("AWS_S3_ALLOW_UNSAFE_RENAME", "true", "never by an unsafe rename"),
        ("aws_s3_allow_unsafe_rename", "1", "never by an unsafe rename"),
        ("AWS_CONDITIONAL_PUT", "disabled", "only with conditional writes"),
        ("conditional_put", "dynamo:delta_log", "only with conditional writes"),
        ("AWS_COPY_IF_NOT_EXISTS", "multipart", "not copy-if-not-exists"),
    ],
)
def test_settings_that_commit_without_conditional_writes_are_refused(
    monkeypatch: pytest.MonkeyPatch, key: str, value: str, message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message) as raised:
        table_options(TABLE, {key: value})
    assert raised.value.path == TABLE
    monkeypatch.setenv(key.upper(), value)  # delta-rs reads the variable as well
    with pytest.raises(InvalidArgumentError, match=message):
        table_options(TABLE, {})


def test_storage_options_are_for_s3_tables_and_other_schemes_are_refused(tmp_path: Path) -> None:
    local = str(tmp_path)
    assert table_options(local, None) == {} and table_options(local, {}) == {}
    with pytest.raises(InvalidArgumentError, match="are for s3:// tables"):
        table_options(local, {"AWS_REGION": "eu-west-1"})
    assert table_uri("table") == os.path.abspath("table")
    assert table_uri("s3://lake/t/") == "s3://lake/t" and table_uri("s3a://lake") == "s3a://lake"
    assert is_object_store("S3://lake/t") and not is_object_store(local)
    with pytest.raises(InvalidArgumentError, match="no bucket"):
        table_uri("s3:///t")
    with pytest.raises(InvalidArgumentError, match="gs:// is not supported"):
        table_uri("gs://lake/t")


def test_storage_options_are_key_value_texts_the_last_of_a_key_winning() -> None:
    assert parse_options(["AWS_REGION=eu-west-1", "aws_region=us-east-1", "X=a=b"]) == {
        "aws_region": "us-east-1",
        "X": "a=b",
    }
    assert parse_options([]) == {}
    for bad in ("AWS_REGION", "=x"):
        with pytest.raises(InvalidArgumentError, match="KEY=VALUE"):
            parse_options([bad])
