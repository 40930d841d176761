"""A real S3-compatible server for the tests: moto in server mode (PyPI ``moto[server]``,
``python -m moto.server``) on 127.0.0.1 and a free port, in memory, with S3's conditional writes
(``If-None-Match: *``, ``If-Match``); buckets made with boto3; a Delta table's log read back
from it (Delta protocol, "Actions": the ``txn`` action)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

REGION = "us-east-1"
ACCESS_KEY, SECRET_KEY = "moonish-test-key", "moonish-test-secret"


@dataclass
class S3Server:
    """A running moto server: ``endpoint`` is its ``http://127.0.0.1:<port>``."""

    endpoint: str
    process: subprocess.Popen[bytes]

    @property
    def environment(self) -> dict[str, str]:
        """The AWS environment variables that point delta-rs (and boto3) at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
        }

    @property
    def storage_options(self) -> dict[str, str]:
        """The same settings as delta-rs storage options (lower-case keys, as its docs
        write them)."""
        return {key.lower(): value for key, value in self.environment.items()}

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )

    def bucket(self) -> str:
        """A new, empty bucket's name."""
        name = f"moonish-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def log_actions(self, table_uri: str) -> list[list[dict[str, Any]]]:
        """The actions of each JSON commit in the table's ``_delta_log/``, in version order."""
        bucket, _, prefix = table_uri.removeprefix("s3://").partition("/")
        client = self.client()
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=f"{prefix.strip('/')}/_delta_log/"
        )
        keys = sorted(
            item["Key"]
            for page in pages
            for item in page.get("Contents", [])
            if item["Key"].endswith(".json")
        )
        return [
            [
                orjson.loads(line)
                for line in client.get_object(Bucket=bucket, Key=key)["Body"].read().splitlines()
            ]
            for key in keys
        ]

    def txn_versions(self, table_uri: str, app_id: str) -> list[int]:
        """As ``tests.support.delta.txn_versions``, for a table in this server."""
        return [
            action["txn"]["version"]
            for commit in self.log_actions(table_uri)
            for action in commit
            if "txn" in action and action["txn"]["appId"] == app_id
        ]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def moto_server() -> Iterator[S3Server]:
    """Start moto's server on a free port of 127.0.0.1, wait until it answers, stop it after."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = S3Server(f"http://127.0.0.1:{port}", process)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                server.client().list_buckets()
                break
            except Exception:
                assert process.poll() is None, "moto_server exited at start"
                assert time.monotonic() < deadline, "moto_server did not start"
                time.sleep(0.05)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    """One moto server per test module; tests keep apart by bucket (``s3.bucket()``)."""
    pytest.importorskip("moto.server")
    pytest.importorskip("boto3")
    yield from moto_server()
