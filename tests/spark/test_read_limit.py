"""The data source's read limit (``maxRecordsPerTrigger``) is shared fairly over the shards and
never exceeded."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")
pytestmark = pytest.mark.spark


def test_read_limit_isshared_fairly_and_never_exceeded() -> None:
    from moonish.spark.datasource import share

    start = {"0": 1, "1": 1, "2": 5}
    end = {"0": 1001, "1": 11, "2": 5, "3": 501}
    cut = share(start, end, 600)
    read = {shard: cut[shard] - start.get(shard, 1) for shard in cut}
    assert read == {"0": 295, "1": 10, "2": 0, "3": 295}
    assert share(start, end, 1) != {shard: start.get(shard, 1) for shard in end}  # progress
