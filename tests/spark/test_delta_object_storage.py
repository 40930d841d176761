"""The Delta table in an S3-compatible store (moto in server mode on 127.0.0.1), without Spark:
two writers committing the same version never overwrite each other (S3 conditional writes);
a missing bucket is an invalid argument, an unreachable endpoint unavailable, each naming the
table and the endpoint; settings for unsafe commits are refused before anything is written."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

pytest.importorskip("deltalake")
pytest.importorskip("moto.server")
pytest.importorskip("boto3")

import orjson
from deltalake import DeltaTable, write_deltalake

from moonish.errors import InvalidArgumentError, UnavailableError
from moonish.spark.delta import create_table, merge_batch, open_table
from moonish.spark.storage import table_options
from tests.support.delta import table_rows
from tests.support.servers.moto_s3 import S3Server, free_port, s3

__all__ = ["s3"]  # the module-scoped fixture
pytestmark = pytest.mark.s3

EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def rows(*keys: bytes, lsn: int = 1) -> Any:
    """Latest-change rows setting each key to its own name, as ``merge_batch`` takes them."""
    return table_rows(
        *(
            {
                "db": 0,
                "key": key,
                "shard": 0,
                "lsn": lsn,
                "commit_ts": EPOCH,
                "deleted": False,
                "image": orjson.dumps({"type": "string", "value": key.decode()}).decode(),
            }
            for key in keys
        ),
        buckets=4,
    )


def test_two_writers_of_one_version_never_overwrite_each_other(s3: S3Server) -> None:
    table = f"s3://{s3.bucket()}/tables/redis"
    create_table(table, 4, s3.storage_options)
    merge_batch(table, rows(b"base"), "app", 0, s3.storage_options)
    # Both writers loaded version 1 and each commits version 2: with If-None-Match the
    # second is refused by the store, reloads the log and commits version 3.
    options = table_options(table, s3.storage_options)  # what moonish hands delta-rs
    first, second = (DeltaTable(table, storage_options=options) for _ in range(2))
    assert first.version() == second.version() == 1
    write_deltalake(first, rows(b"first").drop_columns(["deleted"]), mode="append")
    write_deltalake(second, rows(b"second").drop_columns(["deleted"]), mode="append")
    commits = s3.log_actions(table)
    assert len(commits) == 4  # versions 0 to 3, each its own file
    added = [[action["add"]["path"] for action in commit if "add" in action] for commit in commits]
    assert all(added[1:]) and len({path for paths in added for path in paths}) == sum(
        len(paths) for paths in added
    )
    current = DeltaTable(table, storage_options=s3.storage_options)
    keys = sorted(current.to_pyarrow_table(columns=["key"]).column("key").to_pylist())
    assert current.version() == 3 and keys == [b"base", b"first", b"second"]


def test_a_missing_bucket_is_an_invalid_argument(s3: S3Server) -> None:
    table = "s3://no-such-bucket-here/tables/redis"
    for call in (
        lambda: open_table(table, s3.storage_options),
        lambda: create_table(table, 4, s3.storage_options),
        lambda: merge_batch(table, rows(b"a"), "app", 0, s3.storage_options),
    ):
        with pytest.raises(InvalidArgumentError, match="no bucket 'no-such-bucket-here'") as raised:
            call()
        assert raised.value.path == table and s3.endpoint in raised.value.message


def test_an_unreachable_endpoint_is_unavailable(s3: S3Server) -> None:
    table = f"s3://{s3.bucket()}/tables/redis"
    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(UnavailableError, match=f"cannot reach the object store at {nowhere}"):
        open_table(table, {**s3.storage_options, "aws_endpoint_url": nowhere})


def test_unsafe_commit_settings_are_refused_before_anything_is_written(s3: S3Server) -> None:
    bucket = s3.bucket()
    unsafe = {**s3.storage_options, "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
    with pytest.raises(InvalidArgumentError, match="never by an unsafe rename"):
        create_table(f"s3://{bucket}/t", 4, unsafe)
    assert s3.client().list_objects_v2(Bucket=bucket).get("KeyCount") == 0
