"""The cluster the tests of a cluster capture run against: 3 masters with a replica each."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.servers.cluster import Cluster, redis_cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with redis_cluster(tmp_path / "cluster") as running:
        yield running
