"""A client of ``moonish serve``: the in-process read API over HTTP.

``moonish.connect(url, token=None)`` returns a :class:`Client` whose ``read``/``tail``/``ack``
have the shapes of ``moonish.read``/``moonish.tail``/``moonish.ack`` for a data directory:

- ``read(position, limit, consumer=...)`` → ``.events`` (:class:`RemoteEvent`: ``shard``,
  ``lsn``, ``op``, ``commit_us``, ``envelope`` bytes, ``token``; ``.envelopes`` lists the
  bytes) and ``.token``, where to resume;
- ``tail(position, follow=True, consumer=..., resolved_ms=...)`` → an iterator of events
  (and ``moonish.Resolved`` markers) with ``.token`` and ``.batches()``, that reconnects
  after the server restarts and resumes from the last token it received: every change
  once, in stream order;
- ``ack(consumer, token)``, and ``info()``, ``consumers()``, ``create_consumer``, ``seek``,
  ``drop``.

What a client sees is what an in-process merged reader sees (docs/reading.md, docs/server.md):
committed records only, each shard in LSN order, a token after every change. Errors are the
in-process ones (moonish.remote.errors), so the CLI's exit codes are the same.

Example::

    import moonish

    with moonish.connect("https://cdc.example:8470", token=secret,
                         options=moonish.remote.ClientOptions(cafile="ca.pem")) as server:
        page = server.read("earliest", limit=100)
        for event in page.events:
            print(event.shard, event.lsn, event.op, event.token)
        with server.tail(page.token, follow=True) as stream:
            for event in stream:
                handle(event.envelope)
                server.ack("billing", stream.token)      # as a consumer, after processing

HTTP is aiohttp on a private event loop (moonish.remote.transport explains the choice); it is
imported when a client is made, not by ``import moonish``. Nothing here imports moonish.serve:
this package knows the server only by its HTTP API.
"""

import importlib
from typing import TYPE_CHECKING, Any

_PUBLIC = {
    "Client": "moonish.remote.client",
    "connect": "moonish.remote.client",
    "RemoteProtocolError": "moonish.remote.errors",
    "RemoteUnauthorizedError": "moonish.remote.errors",
    "RemoteUnavailableError": "moonish.remote.errors",
    "RemoteBatch": "moonish.remote.events",
    "RemoteEvent": "moonish.remote.events",
    "RemoteResult": "moonish.remote.events",
    "ClientOptions": "moonish.remote.options",
    "is_url": "moonish.remote.options",
    "read_token_file": "moonish.remote.options",
    "RemoteTail": "moonish.remote.tail",
}
"""Public name -> the module that defines it; each is imported on first use (PEP 562), so
that a program that only asks whether a path is a URL loads no client."""


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use.

    Raises:
        AttributeError: no such name.
    """
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})


if TYPE_CHECKING:
    from moonish.remote.client import Client, connect
    from moonish.remote.errors import (
        RemoteProtocolError,
        RemoteUnauthorizedError,
        RemoteUnavailableError,
    )
    from moonish.remote.events import RemoteBatch, RemoteEvent, RemoteResult
    from moonish.remote.options import ClientOptions, is_url, read_token_file
    from moonish.remote.tail import RemoteTail

__all__ = [
    "Client",
    "ClientOptions",
    "RemoteBatch",
    "RemoteEvent",
    "RemoteProtocolError",
    "RemoteResult",
    "RemoteTail",
    "RemoteUnauthorizedError",
    "RemoteUnavailableError",
    "connect",
    "is_url",
    "read_token_file",
]
