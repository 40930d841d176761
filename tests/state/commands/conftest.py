"""The module-scoped redis-server of the tests that compare command families with Redis
(tests.support.redis.redis_compare)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.support.servers.redis_server import redis_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[redis.Redis]:
    with redis_server(tmp_path_factory.mktemp("redis")) as client:
        yield client
