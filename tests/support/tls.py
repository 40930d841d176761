"""Certificates for the tests that run servers over TLS, made with ``openssl``."""

from __future__ import annotations

import subprocess
from pathlib import Path


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


def make_certificates(where: Path) -> Path:
    """Write into ``where`` a CA (``ca.crt``, ``ca.key``), and a server and a client
    certificate it signed for 127.0.0.1 (``server.crt``/``.key``, ``client.crt``/``.key``);
    returns ``where`` (created if missing)."""
    where.mkdir(parents=True, exist_ok=True)
    curve = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(
        "req",
        "-x509",
        *curve,
        "-keyout",
        where / "ca.key",
        "-out",
        where / "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=moonish test CA",
    )
    (where / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    for name in ("server", "client"):
        _openssl(
            "req",
            *curve,
            "-keyout",
            where / f"{name}.key",
            "-out",
            where / f"{name}.csr",
            "-subj",
            f"/CN={name}",
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            where / f"{name}.csr",
            "-CA",
            where / "ca.crt",
            "-CAkey",
            where / "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            where / "san.ext",
            "-out",
            where / f"{name}.crt",
        )
    return where
