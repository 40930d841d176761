"""GEOADD, GEORADIUS/GEORADIUSBYMEMBER … STORE, GEOSEARCHSTORE and random searches against a real
redis-server: each case runs the same commands on a redis-server started here and on a
ShardWriter (tests.support.redis.redis_compare ``run``): the same replies, the same keyspace after
every command and after the log is replayed."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.redis.redis_compare import RANDOM, run

pytestmark = pytest.mark.redis

GEO_SETUP: list[list[str | bytes]] = [
    [
        "GEOADD",
        "g",
        "13.361389",
        "38.115556",
        "Palermo",
        "15.087269",
        "37.502669",
        "Catania",
        "12.4964",
        "41.9028",
        "Rome",
        "2.3522",
        "48.8566",
        "Paris",
        "-0.1276",
        "51.5072",
        "London",
        "13.4050",
        "52.52",
        "Berlin",
        "-74.006",
        "40.7128",
        "NYC",
        "151.2093",
        "-33.8688",
        "Sydney",
    ],
]


GEO_CASES: dict[str, list[list[str | bytes]]] = {
    "GEORADIUS and GEORADIUSBYMEMBER": [
        *GEO_SETUP,
        ["GEORADIUS", "g", "15", "37", "200", "km", "STORE", "d"],
        ["GEORADIUS", "g", "15", "37", "200", "km", "STOREDIST", "d"],
        ["GEORADIUS", "g", "15", "37", "2000", "km", "COUNT", "3", "STORE", "d"],
        ["GEORADIUS", "g", "15", "37", "2000", "km", "COUNT", "2", "DESC", "STOREDIST", "d"],
        ["GEORADIUS", "g", "15", "37", "5000", "mi", "ASC", "STOREDIST", "d"],
        ["GEORADIUS", "g", "15", "37", "20000", "km", "STOREDIST", "d"],
        ["GEORADIUS", "g", "15", "37", "1", "m", "STORE", "d"],  # empty: d is deleted
        ["GEORADIUSBYMEMBER", "g", "Rome", "1500", "km", "STOREDIST", "d"],
        ["GEORADIUSBYMEMBER", "g", "Nope", "1500", "km", "STORE", "d"],
        ["GEORADIUS", "g", "15", "37", "200", "km", "WITHDIST", "STORE", "d"],
        ["GEORADIUS", "missing", "15", "37", "200", "km", "STORE", "d"],
        ["GEORADIUSBYMEMBER", "missing", "x", "y", "z", "STORE", "g2"],
        ["SET", "s", "v"],
        ["GEORADIUS", "s", "15", "37", "200", "km", "STORE", "d"],
        ["GEORADIUS", "g", "15", "37", "x", "km", "STORE", "d"],
        ["GEORADIUS", "g", "15", "37", "1", "km", "STORE"],
    ],
    "GEOSEARCHSTORE": [
        *GEO_SETUP,
        [
            "GEOSEARCHSTORE",
            "d",
            "g",
            "FROMLONLAT",
            "2",
            "48",
            "BYBOX",
            "2000",
            "1000",
            "km",
            "STOREDIST",
        ],
        [
            "GEOSEARCHSTORE",
            "d",
            "g",
            "FROMMEMBER",
            "Paris",
            "BYRADIUS",
            "1000",
            "km",
            "ASC",
            "COUNT",
            "2",
            "ANY",
        ],
        ["GEOSEARCHSTORE", "d", "g", "FROMMEMBER", "Sydney", "BYBOX", "100", "100", "ft"],
        ["GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "200", "48", "BYBOX", "2000", "1000", "km"],
        ["GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "2", "48", "BYRADIUS", "1", "parsec"],
        ["GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "2", "48", "BYRADIUS", "-1", "m"],
        ["GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "2", "48", "BYRADIUS", "1", "m", "WITHDIST"],
        ["GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "2", "48", "BYRADIUS", "1", "m", "ANY"],
        ["GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "2", "48", "BYRADIUS", "1", "m", "COUNT", "0"],
        ["GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "2", "48", "BYBOX", "1", "m", "x", "km"],
        [
            "GEOSEARCHSTORE",
            "d",
            "g",
            "FROMMEMBER",
            "Paris",
            "FROMLONLAT",
            "2",
            "48",
            "BYRADIUS",
            "1",
            "m",
        ],
        [
            "GEOSEARCHSTORE",
            "d",
            "g",
            "FROMMEMBER",
            "Paris",
            "BYRADIUS",
            "1",
            "m",
            "BYBOX",
            "1",
            "1",
            "m",
        ],
        ["GEOSEARCHSTORE", "d", "g", "BYRADIUS", "1", "m", "ASC", "ASC"],
        ["GEOSEARCHSTORE", "d", "g", "FROMMEMBER", "Paris", "ASC", "ASC", "DESC"],
        ["GEOADD", "g", "NX", "CH", "0", "0", "Null", "1", "1", "Rome"],
        ["GEOADD", "g", "NX", "XX", "0", "0", "a"],
        ["GEOADD", "g", "0", "90", "x"],
        ["GEOADD", "g", "XX", "0", "0", "y", "1"],
        ["GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "0", "0", "BYRADIUS", "0", "m", "STOREDIST"],
        ["GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "0.5", "0.5", "BYBOX", "400", "400", "km"],
    ],
}


@settings(max_examples=40, **RANDOM)
@given(
    points=st.lists(
        st.tuples(st.floats(-180, 180), st.floats(-85.05112878, 85.05112878)),
        min_size=1,
        max_size=40,
    ),
    centre=st.tuples(st.floats(-180, 180), st.floats(-85, 85)),
    radius_km=st.sampled_from(["0.5", "50", "700", "3000", "9000"]),
    count=st.sampled_from([[], ["COUNT", "3"], ["COUNT", "5", "DESC"]]),
)
def test_geo_searches_match_redis(
    server: redis.Redis,
    tmp_path_factory: pytest.TempPathFactory,
    points: list[tuple[float, float]],
    centre: tuple[float, float],
    radius_km: str,
    count: list[str],
) -> None:
    """Random points and searches: the members found, their geohashes and distances."""
    geoadd: list[str | bytes] = ["GEOADD", "g"]
    for n, (lon, lat) in enumerate(points):
        geoadd += [repr(lon), repr(lat), f"m{n}"]
    x, y = repr(centre[0]), repr(centre[1])
    run(
        server,
        tmp_path_factory.mktemp("geo"),
        [
            geoadd,
            ["GEORADIUS", "g", x, y, radius_km, "km", *count, "STOREDIST", "d"],
            [
                "GEOSEARCHSTORE",
                "b",
                "g",
                "FROMLONLAT",
                x,
                y,
                "BYBOX",
                radius_km,
                radius_km,
                "km",
                *count,
                "STOREDIST",
            ],
            ["GEORADIUSBYMEMBER", "g", "m0", radius_km, "mi", *count, "STORE", "e"],
        ],
    )


ALL_CASES = {
    f"{family}: {name}": commands
    for family, cases in [
        ("geo", GEO_CASES),
    ]
    for name, commands in cases.items()
}


@pytest.mark.parametrize("name", list(ALL_CASES))
def test_case(server: redis.Redis, tmp_path: Path, name: str) -> None:
    run(server, tmp_path, ALL_CASES[name])
