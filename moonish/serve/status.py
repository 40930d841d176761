"""``GET /``: the status page, one static HTML file with its script and style inline
(``static/status.html``).

The page reads ``GET /v1/info`` every second (shards, consumers with their lag, the server's
figures; records/s is the growth of the shards' latest LSNs between two reads) and shows the
newest changes live from ``/v1/changes?feed=eventsource&since=now``. It holds no data of
its own: what it shows, it fetches with the caller's credentials.

**Decision: a browser passes the bearer token as ``/?access_token=<token>``**, which the
server's guard already takes on every path (RFC 6750 §2.3, for ``EventSource``); the page
reads it from its own URL and sends it on, as an ``Authorization`` header to ``/v1/info`` and
as ``access_token`` to the ``EventSource``. No cookie: a cookie would be sent by the
browser to this origin from any page (CSRF on the consumer endpoints) and needs a login
step; the guard, and so what a request without the token learns (401, nothing else),
stays as it is. The URL holds the token, so the page sets ``Referrer-Policy: no-referrer``,
loads nothing from elsewhere, and forbids framing; its Content-Security-Policy allows only
its own inline script and style (by hash) and requests to its own origin.
"""

from __future__ import annotations

import base64
import hashlib
import re
from importlib import resources

from aiohttp import web

from moonish.serve.hub import ServerState

PAGE = resources.files("moonish.serve").joinpath("static/status.html").read_bytes()


def _hash(tag: bytes) -> str:
    match = re.search(rb"<%b>(.*?)</%b>" % (tag, tag), PAGE, re.DOTALL)
    if match is None:
        raise RuntimeError(f"static/status.html has no <{tag.decode()}>")
    digest = base64.b64encode(hashlib.sha256(match.group(1)).digest()).decode()
    return f"'sha256-{digest}'"


HEADERS = {
    "Content-Security-Policy": (
        f"default-src 'none'; script-src {_hash(b'script')}; style-src {_hash(b'style')}; "
        "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


async def page(request: web.Request, state: ServerState) -> web.Response:
    """``GET /``: the status page (behind the same bearer-token guard as every path)."""
    return web.Response(body=PAGE, content_type="text/html", charset="utf-8", headers=HEADERS)
