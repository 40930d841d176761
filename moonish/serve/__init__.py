"""``moonish serve``: the change stream of one data directory over HTTP and WebSocket.

- ``GET /v1/changes``: CouchDB's ``_changes`` feeds (``normal``, ``longpoll``,
  ``continuous``, ``eventsource``) over the merged stream (moonish.serve.feeds);
- ``GET /v1/ws``: push with credit, acks and cancel (moonish.serve.websocket);
- ``GET /v1/info``, ``/v1/consumers[/<name>[/ack|/seek]]`` (moonish.serve.admin).

What a client sees is what an in-process merged reader sees (docs/reading.md): committed
records only, each change once after the position asked for, each shard in LSN order, a
token after every change from which a new request gives exactly the rest. One reader
(moonish.serve.ring) reads and encodes each change once for every subscriber; a subscriber
that falls behind reads the log on its own and rejoins (moonish.serve.subscription).

docs/server.md is the reference: every endpoint with curl and browser examples, framing,
errors, security and limits. No module of the library imports this package; ``cli`` does.
"""

from moonish.serve.app import Server, make_app, run
from moonish.serve.options import Limits, ServeOptions, load_token
from moonish.serve.timer import ManualTimer

__all__ = ["Limits", "ManualTimer", "ServeOptions", "Server", "load_token", "make_app", "run"]
