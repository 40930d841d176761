"""A Redis Cluster whose nodes speak TLS only (clients, replication and the cluster bus),
captured from a ``rediss://`` seed with a client certificate as an ACL user with only the
permissions docs/redis-source.md lists for a cluster (moonish.redis.cluster.runner), against
a real cluster on 127.0.0.1: every link, its side connections and the topology reads go over
TLS to each node's TLS port as that user, reading replicas too, a slot migration is paired,
and a restart continues every link by ``PSYNC``."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from moonish.redis.capture.status import CaptureOptions
from moonish.redis.cluster.runner import capture_cluster
from moonish.redis.replication.messages import ReplicaOptions
from tests.support.redis.capture import FAST, Following, wait_for
from tests.support.redis.cluster import (
    assert_captured,
    caught_up_report,
    mixed_writes,
    replicas_online,
    reshard,
    writer,
)
from tests.support.servers.cluster import Cluster, redis_cluster
from tests.support.tls import make_certificates

pytestmark = pytest.mark.redis


CAPTURE_USER = (
    *("--user", "capture", "on", ">s3cret"),
    *("+psync", "+replconf", "+ping", "+info"),
    *("+cluster|info", "+cluster|nodes", "+cluster|shards"),
    *("+exists", "%R~*"),
)
"""The ACL user of docs/redis-source.md ("What Redis must allow"), for every node."""


@pytest.fixture
def tls_cluster(tmp_path: Path) -> Iterator[Cluster]:
    certificates = make_certificates(tmp_path / "tls")
    with redis_cluster(tmp_path / "cluster", tls=certificates, extra=CAPTURE_USER) as running:
        yield running


def over_tls(cluster: Cluster) -> CaptureOptions:
    assert cluster.tls is not None
    replica = ReplicaOptions(
        tls_ca_file=str(cluster.tls / "ca.crt"),
        tls_cert_file=str(cluster.tls / "client.crt"),
        tls_key_file=str(cluster.tls / "client.key"),
    )
    return dataclasses.replace(FAST, replica=replica)


def test_a_tls_cluster_is_captured_and_resumed(tls_cluster: Cluster, tmp_path: Path) -> None:
    data = tmp_path / "data"
    url = tls_cluster.url().replace("rediss://", "rediss://capture:s3cret@")
    client = writer(tls_cluster)
    for number in range(2000):
        client.set(f"still:{number}", number)
    mixed_writes(client, 0, 200)
    following = Following(url, data, 4, capture_cluster, over_tls(tls_cluster))
    caught_up_report(following, tls_cluster)
    first, second = tls_cluster.master_ports()[:2]
    reshard(tls_cluster, first, second, 100)  # EXISTS and CLUSTER NODES on the masters
    mixed_writes(client, 200, 200)
    caught_up_report(following, tls_cluster)
    report = following.finish()
    assert report.full_resyncs == 3 and (report.migrations or {}).get("migrated")
    assert {link["state"] for link in report.links or []} == {"stopped"}

    mixed_writes(client, 400, 200)
    options = over_tls(tls_cluster).replica
    wait_for(lambda: replicas_online(tls_cluster, options), "the seed to see every replica online")
    following = Following(url, data, 4, capture_cluster, over_tls(tls_cluster), prefer_replica=True)
    caught_up_report(following, tls_cluster)
    report = following.finish()
    client.close()
    assert report.full_resyncs == 0 and report.continues == 3
    assert {link["role"] for link in report.links or []} == {"replica"}
    assert_captured(tls_cluster, data)
