"""Secrets kept out of what ``config check`` and ``run`` print: a URL's password, the values
of keys named for a secret, librdkafka settings named for one, and values taken from
environment variables named for one."""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import urlsplit

MASK = "***"

_SECRET_NAME = re.compile(r"password|passwd|secret|token|credential|jaas|private|key(?!s)", re.I)
_PATH_NAME = re.compile(r"(_file|\.location|_dir|_cert|tls_key)$", re.I)
_URL_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*://[^:@/]*:)([^@/]*)(@)")


def secret_name(name: str) -> bool:
    """Whether a key, librdkafka setting or environment variable named ``name`` holds a
    secret (``sasl.password``, ``REDIS_PASSWORD``, ``api_token``), not a file naming one
    (``token_file``, ``ssl.key.location``, ``tls_key``: paths, shown)."""
    return bool(_SECRET_NAME.search(name)) and not _PATH_NAME.search(name)


def mask_url(value: str) -> str:
    """``value`` with the password of a URL's ``user:password@`` replaced by ``***``."""
    if "://" not in value or "@" not in value:
        return value
    try:
        urlsplit(value)
    except ValueError:
        return value
    return _URL_PASSWORD.sub(lambda m: m[1] + (MASK if m[2] else "") + m[3], value)


def mask(
    key: str, value: object, variables: Sequence[str] | Sequence[Sequence[str]] = ()
) -> object:
    """``value`` of ``key`` as it may be shown: ``***`` for a key named for a secret or a value
    taken from a variable named for one (``variables``: the names it took; for a list, the
    names each item took); ``NAME=***`` for a ``NAME=VALUE`` setting named for one; a URL
    without its password; anything else as it is. Lists item by item."""
    if isinstance(value, list):
        per_item = [list(names) if not isinstance(names, str) else [] for names in variables]
        per_item += [[]] * (len(value) - len(per_item))
        return [mask(key, item, names) for item, names in zip(value, per_item, strict=False)]
    names = [name for name in variables if isinstance(name, str)]
    if not isinstance(value, str):
        return value
    if secret_name(key):
        return MASK
    shown = mask_url(value)
    if shown != value:
        return shown  # a URL's password (taken from a variable or not): the rest is shown
    name, sep, _ = value.partition("=")
    if sep and secret_name(name.strip()) and "://" not in name:
        return f"{name}={MASK}"
    if any(secret_name(name) for name in names):
        return MASK
    return value
