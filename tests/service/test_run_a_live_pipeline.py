"""``moonish run`` against a real redis-server: a live capture and the change-feed server in
one supervised process tree. Writes arrive in the WAL and the feed; a part killed with SIGKILL
is restarted; a part failing for good stops the pipeline with its status; SIGTERM stops every
part and frees the shards' locks; the supervisor killed with SIGKILL and started again loses
nothing (the keyspace equals redis-server's, a list pushed to throughout holds each push
once)."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest
import redis

from moonish.redis.routing.filterfile import load_filter
from tests.support.moonish_run import running
from tests.support.processes import gone
from tests.support.redis.capture import events, our_state, redis_state, url_of, wait_for
from tests.support.servers.redis_server import redis_server
from tests.support.servers.serve_util import request

pytestmark = pytest.mark.redis


def write_pipeline(
    tmp_path: Path, client: redis.Redis, serve: str = "port = 0\n", more: str = ""
) -> Path:
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(
        'data_dir = "data"\n\n[source]\n'
        f'url = "{url_of(client)}"\nshards = 2\nsync_interval_ms = 10\n\n'
        f"[serve]\n{serve}\n"
        "[supervisor]\nrestart_backoff_ms = 100\nstop_timeout_ms = 20000\n"
        f"{more}"
    )
    return pipeline


def keys_in_wal(data_dir: Path) -> set[str]:
    return {e["after"]["key"] for e in events(data_dir) if e.get("after")}


def test_writes_arrive_a_killed_part_restarts_and_sigterm_stops_all(tmp_path: Path) -> None:
    with redis_server(tmp_path) as client, running(write_pipeline(tmp_path, client)) as run:
        data = tmp_path / "data"
        url = run.serve_url()
        client.set("before", "1")
        wait_for(lambda: "before" in keys_in_wal(data), "the first write in the WAL")
        status, body = request(f"{url}/v1/changes?since=earliest&limit=100")
        assert status == 200
        assert "before" in {row["change"]["after"]["key"] for row in body["results"]}

        capture = run.pid("source")
        os.kill(capture, signal.SIGKILL)
        wait_for(lambda: run.events("source", "restarting"), "the capture's restart")
        (restart,) = run.events("source", "restarting")
        assert restart["exit_code"] == -signal.SIGKILL and restart["restarts"] == 1
        assert restart["level"] == "warning"
        wait_for(lambda: len(run.events("source", "started")) == 2, "the capture again")
        client.set("after", "2")
        wait_for(lambda: "after" in keys_in_wal(data), "a write after the restart")
        assert run.stop_all() == {"source": 0, "serve": 0}
        assert our_state(data) == redis_state(client)  # opens each shard: the locks are free


def test_a_part_failing_for_good_stops_the_pipeline_with_its_status(tmp_path: Path) -> None:
    with redis_server(tmp_path) as client:
        # serve on a non-loopback host without a token: the command refuses it (exit 2)
        pipeline = write_pipeline(tmp_path, client, serve='host = "0.0.0.0"\nport = 0\n')
        with running(pipeline) as run:
            assert run.process.wait(60) == 2
            (failed,) = run.events("serve", "failed")
            assert failed["level"] == "error" and failed["exit_code"] == 2
            (refusal,) = run.events("serve", "exit")  # the part's own error, a JSON line too
            assert refusal["kind"] == "invalid_argument" and "--token-file" in refusal["message"]
            (exit_line,) = run.events("supervisor", "exit")  # JSON to the last line
            assert exit_line["exit_code"] == 2 and exit_line["failed_part"] == "serve"
            assert "part [serve] exited with status 2" in exit_line["message"]
            assert run.lines()[-1] == exit_line
            assert run.events("source", "stopped")[-1]["exit_code"] == 0
            assert gone(run.pid("source"))


def test_sigkill_of_the_supervisor_then_a_restart_loses_nothing(tmp_path: Path) -> None:
    with redis_server(tmp_path, "--repl-diskless-sync-delay", "0") as client:
        pipeline = write_pipeline(tmp_path, client)
        data = tmp_path / "data"
        pushed = 0
        stop = threading.Event()

        def writer() -> None:
            nonlocal pushed
            while not stop.is_set():
                pushed += 1
                client.rpush("seq", pushed)
                client.set(f"key:{pushed % 50}", pushed)
                stop.wait(0.005)

        thread = threading.Thread(target=writer)
        with running(pipeline) as first:
            first.serve_url()
            thread.start()
            wait_for(lambda: pushed > 200, "writes under the first supervisor")
            wait_for(lambda: "seq" in keys_in_wal(data), "streamed writes in the WAL")
            parts = [first.pid("source"), first.pid("serve")]
            first.process.kill()
            first.process.wait()
            # the kernel sends each part SIGTERM (PR_SET_PDEATHSIG): they stop on their own
            wait_for(lambda: all(gone(pid) for pid in parts), "the parts to stop")
        killed_at = pushed
        wait_for(lambda: pushed > killed_at + 200, "writes with no supervisor")
        with running(pipeline) as second:
            second.serve_url()
            wait_for(lambda: pushed > killed_at + 400, "writes under the second supervisor")
            stop.set()
            thread.join(10)
            client.set("done", "1")
            wait_for(lambda: "done" in keys_in_wal(data), "every write in the WAL", 60)
            assert second.terminate() == 0
            assert not second.events("source", "restarting")
            (psync,) = second.events("source", "psync")  # resumed from the stored position
            assert psync["answer"] == "+CONTINUE", psync
        assert our_state(data) == redis_state(client)
        assert client.lrange("seq", 0, -1) == [str(n).encode() for n in range(1, pushed + 1)]


def test_keys_the_filter_leaves_out_reach_neither_the_wal_nor_the_feed(tmp_path: Path) -> None:
    """``[filter]`` of the issue's example: writes to ``tmp:*`` and ``session:*`` keys, mixed
    with kept ones (one MSET naming both), never reach the WAL or the change feed; the
    shards hold Redis's keyspace without them, and ``filter.json`` counts them."""
    more = '\n[filter]\nexclude_keys = ["tmp:*", "session:*"]\n'
    with redis_server(tmp_path) as client:
        with running(write_pipeline(tmp_path, client, more=more)) as run:
            data = tmp_path / "data"
            url = run.serve_url()
            client.set("first", 0)
            wait_for(lambda: "first" in keys_in_wal(data), "the capture to follow the stream")
            for i in range(20):
                client.set(f"tmp:{i}", i)
                client.hset(f"session:{i}", "user", i)
                client.set(f"user:{i}", i)
            client.mset({"tmp:x": 1, "last": 2})
            wait_for(lambda: "last" in keys_in_wal(data), "the last write in the WAL")
            status, body = request(f"{url}/v1/changes?since=earliest&limit=1000")
            assert status == 200
            fed = {row["change"]["after"]["key"] for row in body["results"]}
            assert fed == keys_in_wal(data) == {f"user:{i}" for i in range(20)} | {"last", "first"}
            assert run.stop_all() == {"source": 0, "serve": 0}
        kept = {
            k: v for k, v in redis_state(client).items() if b":" not in k[1] or k[1][:5] == b"user:"
        }
        assert our_state(data) == kept
    stored = load_filter(str(data))
    assert stored is not None
    assert stored[1] == {"exclude_keys:session:*": 20, "exclude_keys:tmp:*": 21}
