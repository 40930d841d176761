"""``moonish.connect``: the remote client reads what the in-process API reads (same events, same
tokens, same positions), follows, reads and acknowledges as a consumer, maps the server's errors
onto moonish's, and speaks bearer tokens and TLS."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import moonish
from moonish.cdc.merged_read import MergedTail
from moonish.remote import ClientOptions, RemoteUnauthorizedError, RemoteUnavailableError
from moonish.serve import ServeOptions
from tests.support.servers.serve_util import TOKEN, Running, certificate, same
from tests.support.steps import write_steps


def facts(events: Any) -> list[tuple[int, int, str, int, dict[str, Any]]]:
    return [(e.shard, e.lsn, e.op, e.commit_us, same(e.envelope)) for e in events]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    write_steps(tmp_path / "data", 3, [(n % 3, 1 + 2 * (n % 7 == 0), 1) for n in range(60)])
    return tmp_path / "data"


@pytest.mark.slow
def test_read_equals_the_in_process_read_page_after_page(data: Path) -> None:
    with Running(data) as server, moonish.connect(server.url) as client:
        for limit in (1, 4, 50, 10_000):
            position: Any = "earliest"
            while True:
                local = moonish.read(data, position, limit)
                got = client.read(position, limit)
                assert got.token == local.token and facts(got.events) == facts(local.events)
                if got.events:
                    assert [e.token for e in got.events][-1] == got.token
                if not local.events:
                    assert got.pending == 0
                    break
                position = got.token
        assert client.read("now").events.envelopes == []
        middle = moonish.read(data, "earliest", 17).token
        assert facts(client.read(str(middle), 100).events) == facts(
            moonish.read(data, middle, 100).events
        )


def test_tail_equals_the_in_process_tail_event_by_event_with_tokens(data: Path) -> None:
    with Running(data) as server, moonish.connect(server.url) as client:
        for start in ("earliest", str(moonish.read(data, "earliest", 30).token)):
            with MergedTail(data, start) as local, client.tail(start) as remote:
                mine = [(facts([e])[0], str(local.token)) for e in local]
                theirs = [(facts([e])[0], str(remote.token)) for e in remote]
                assert theirs == mine and remote.token == local.token
        with client.tail("now") as remote:
            assert list(remote) == [] and str(remote.token) == client.info()["now"]


def test_tail_follows_new_changes_and_close_from_another_thread_ends_it(data: Path) -> None:
    with Running(data) as server, moonish.connect(server.url) as client:
        stream = client.tail("now", follow=True)
        start = stream.token
        got: list[Any] = []
        reader = threading.Thread(target=lambda: got.extend(stream))
        reader.start()
        time.sleep(0.3)
        write_steps(data, 3, [(2, 3, 1), (0, 1, 1)])
        deadline = time.monotonic() + 10
        while len(got) < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        stream.close()
        reader.join(5)
        assert not reader.is_alive()
        # (at the live edge the order across shards is best effort: compare per shard)
        assert sorted(facts(got)) == sorted(facts(moonish.read(data, start, 100).events))
        assert stream.token == got[-1].token == moonish.read(data, start, 100).token


def test_resolved_markers_come_through(data: Path) -> None:
    with Running(data) as server, moonish.connect(server.url) as client:
        with client.tail("earliest", follow=True, resolved_ms=50) as stream:
            for item in stream:
                if isinstance(item, moonish.Resolved):
                    assert item.token == stream.token
                    break
        with pytest.raises(moonish.InvalidArgumentError, match="follow"):
            client.tail("earliest", resolved_ms=50)


def test_consumers_read_ack_and_tail_through_the_client(data: Path) -> None:
    with Running(data) as server, moonish.connect(server.url) as client:
        made = client.create_consumer("billing", "earliest")
        assert made["token"] == "m3.a0.a0.a0"
        first = client.read(consumer="billing", limit=5)
        assert facts(first.events) == facts(moonish.read(data, "earliest", 5).events)
        assert client.read(consumer="billing", limit=5).token == first.token  # not moved
        assert client.ack("billing", first.token) == first.token
        assert moonish.consumers.load(data, "billing").positions == first.token.positions
        with client.tail(consumer="billing") as stream:
            rest = list(stream)
        assert facts(rest) == facts(moonish.read(data, first.token, 10_000).events)
        assert [c["name"] for c in client.consumers()] == ["billing"]
        assert client.consumer("billing")["lag_records"] == len(rest)
        assert client.seek("billing", "now") == stream.token
        client.drop("billing")
        with pytest.raises(moonish.ConsumerNotFoundError):
            client.read(consumer="billing")
        with pytest.raises(moonish.ConsumerNotFoundError):
            client.tail(consumer="billing")
        with pytest.raises(moonish.InvalidArgumentError, match="not both"):
            client.read("earliest", consumer="x")


def test_errors_are_the_in_process_ones(data: Path, tmp_path: Path) -> None:
    with Running(data) as server, moonish.connect(server.url) as client:
        with pytest.raises(moonish.InvalidArgumentError, match="has 3"):
            client.read("m2.a0.a0")
        with pytest.raises(moonish.InvalidArgumentError, match="LSN"):
            client.read(5)
        with pytest.raises(moonish.InvalidArgumentError):
            client.read("earliest", limit=0)
    trimmed = tmp_path / "trimmed"
    write_steps(trimmed, 2, [(0, 1, 1)] * 40 + [(1, 1, 1)] * 3, segment_bytes=400)
    first = sorted((trimmed / "shard-0").glob("*.seg"))[0]
    for path in [first, *first.parent.glob(f"{first.stem}.idx")]:
        path.unlink()
    with Running(trimmed) as server, moonish.connect(server.url) as client:
        with pytest.raises(moonish.PositionNotRetainedError) as info:
            client.read("m2.a0.a0")
        assert info.value.gone > 0 and info.value.oldest_token.startswith("m2.")
        with pytest.raises(moonish.PositionNotRetainedError):
            list(client.tail("m2.a0.a0"))
        url = server.url
    options = ClientOptions(connect_timeout_ms=2000)
    with moonish.connect(url, options=options) as client:  # the server is gone
        with pytest.raises(RemoteUnavailableError) as gone:
            client.read("earliest")
        assert gone.value.kind == "unavailable"
    with pytest.raises(moonish.InvalidArgumentError, match="http"):
        moonish.connect("ftp://127.0.0.1:1")
    with pytest.raises(moonish.InvalidArgumentError, match="credentials"):
        moonish.connect("http://127.0.0.1:1/?access_token=x")


@pytest.mark.slow
def test_bearer_token_and_tls(data: Path, tmp_path: Path) -> None:
    cert, key = certificate(tmp_path)
    options = ServeOptions(port=0, token=TOKEN, tls_cert=str(cert), tls_key=str(key))
    trusted = ClientOptions(cafile=str(cert))
    with Running(data, options) as server:
        assert server.url.startswith("https://")
        with moonish.connect(server.url, TOKEN, trusted) as client:
            assert facts(client.read("earliest", 100).events) == facts(
                moonish.read(data, "earliest", 100).events
            )
            with client.tail("earliest", follow=True) as stream:
                assert next(iter(stream)).lsn == 1
        for token in (None, "wrong-token-0123456789"):
            with moonish.connect(server.url, token, trusted) as client:
                with pytest.raises(RemoteUnauthorizedError):
                    client.read("earliest")
                with pytest.raises(RemoteUnauthorizedError):
                    client.tail("now", follow=True)
        with (
            moonish.connect(server.url, TOKEN) as client,  # a certificate nobody trusts
            pytest.raises(moonish.InvalidArgumentError, match="TLS"),
        ):
            client.read("earliest")
        with moonish.connect(server.url, TOKEN, ClientOptions(verify_tls=False)) as client:
            assert client.read("earliest", 1).events


def test_import_moonish_does_not_load_aiohttp() -> None:
    code = "import sys, moonish; print('aiohttp' in sys.modules); moonish.connect('http://x:1')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True).stdout
    assert out == b"False\n"  # loaded by connect(), once a client exists


def test_the_clients_row_split_reads_the_servers_row_framing() -> None:
    """moonish.remote does not import moonish.serve: its row parser and the server's framing
    are tied here (a change to either breaks this test, not a client in the field)."""
    from moonish.remote.events import split_row
    from moonish.serve.chunks import ROWS

    envelope = b'{"before":null,"after":{"key":"a\\"b","value":"}"},"op":"c"}'
    line = ROWS.line(b"m2.b12.a7", envelope)
    assert line.endswith(b"\n") and split_row(line[:-1]) == ("m2.b12.a7", envelope)
    assert split_row(ROWS.position(moonish.Token.parse("m2.b12.a7"))[:-1]) is None
