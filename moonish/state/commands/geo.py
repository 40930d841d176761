"""GEOADD (a ZADD of geohash scores, as Redis propagates it) and the geo searches that store:
GEORADIUS … STORE/STOREDIST, GEORADIUSBYMEMBER … STORE/STOREDIST,
GEOSEARCHSTORE (semantics of Redis 7.0: src/geo.c ``georadiusGeneric``, src/geohash.c,
src/geohash_helper.c). Without a store key GEORADIUS replies with the members found and writes
nothing (Redis does not propagate it).

A geo set is a sorted set whose scores are 52-bit geohashes (26 steps of interleaved latitude
and longitude bits). A search, as Redis does it, looks at the sorted set ranges of the geohash
box of the centre and its eight neighbours (at a precision estimated from the radius), keeps
the members whose decoded position (the centre of their 52-bit cell) is within the radius or
box, measured with the haversine formula on a sphere of radius 6372797.560856 m, all in
doubles in Redis's order of operations. ``COUNT`` sorts by distance (ascending unless
``DESC``) and keeps the nearest; ``ANY`` stops at the first ``COUNT`` found, in box order.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from moonish.errors import CommandError
from moonish.state.commands import parse
from moonish.state.commands.hash_set_list import store_result
from moonish.state.commands.sorted_sets import cmd_zadd
from moonish.state.keyspace import Access
from moonish.values.model import ZSET, Entry, SortedSet

LAT_MIN, LAT_MAX, LONG_MIN, LONG_MAX = -85.05112878, 85.05112878, -180.0, 180.0
STEP_MAX = 26
EARTH_RADIUS_M = 6372797.560856
MERCATOR_MAX = 20037726.37
D_R = math.pi / 180.0
_MASK64 = (1 << 64) - 1
_EVEN, _ODD = 0x5555555555555555, 0xAAAAAAAAAAAAAAAA
_UNITS = {b"M": 1.0, b"KM": 1000.0, b"FT": 0.3048, b"MI": 1609.34}

Hash = tuple[int, int]
"""(bits, step); (0, 0) is no box."""


def _spread(value: int) -> int:
    """The 32 bits of ``value`` at the even bit positions."""
    out = 0
    for i in range(32):
        out |= ((value >> i) & 1) << (2 * i)
    return out


def _gather(value: int) -> int:
    """The even bits of ``value`` as a 32-bit number."""
    out = 0
    for i in range(32):
        out |= ((value >> (2 * i)) & 1) << i
    return out


def encode(longitude: float, latitude: float, step: int) -> Hash:
    """``geohashEncode``: latitude bits at even positions, longitude bits at odd ones."""
    lat_offset = (latitude - LAT_MIN) / (LAT_MAX - LAT_MIN) * float(1 << step)
    long_offset = (longitude - LONG_MIN) / (LONG_MAX - LONG_MIN) * float(1 << step)
    lat_bits, long_bits = int(lat_offset) & 0xFFFFFFFF, int(long_offset) & 0xFFFFFFFF
    return _spread(lat_bits) | _spread(long_bits) << 1, step


def _area(hashed: Hash) -> tuple[float, float, float, float]:
    """``geohashDecode``: (longitude min, longitude max, latitude min, latitude max)."""
    bits, step = hashed
    lat_cell, long_cell = _gather(bits), _gather(bits >> 1)
    cells = float(1 << step)
    lat_scale, long_scale = LAT_MAX - LAT_MIN, LONG_MAX - LONG_MIN
    return (
        LONG_MIN + (long_cell * 1.0 / cells) * long_scale,
        LONG_MIN + ((long_cell + 1) * 1.0 / cells) * long_scale,
        LAT_MIN + (lat_cell * 1.0 / cells) * lat_scale,
        LAT_MIN + ((lat_cell + 1) * 1.0 / cells) * lat_scale,
    )


def decode_score(score: float) -> tuple[float, float]:
    """``decodeGeohash``: the centre of a score's 52-bit cell, clamped to the valid range."""
    bits = int(score) & _MASK64 if math.isfinite(score) else 0
    long_min, long_max, lat_min, lat_max = _area((bits, STEP_MAX))
    longitude = min(max((long_min + long_max) / 2, LONG_MIN), LONG_MAX)
    latitude = min(max((lat_min + lat_max) / 2, LAT_MIN), LAT_MAX)
    return longitude, latitude


def _move(hashed: Hash, dx: int, dy: int) -> Hash:
    """``geohash_move_x`` then ``geohash_move_y``."""
    bits, step = hashed
    shift = 64 - step * 2
    if dx:
        x, y, zz = bits & _ODD, bits & _EVEN, _EVEN >> shift
        x = (x + zz + 1) if dx > 0 else ((x | zz) - (zz + 1))
        bits = (x & (_ODD >> shift) & _MASK64) | y
    if dy:
        x, y, zz = bits & _ODD, bits & _EVEN, _ODD >> shift
        y = (y + zz + 1) if dy > 0 else ((y | zz) - (zz + 1))
        bits = x | (y & (_EVEN >> shift) & _MASK64)
    return bits, step


def lat_distance(lat1: float, lat2: float) -> float:
    return EARTH_RADIUS_M * abs(lat2 * D_R - lat1 * D_R)


def distance(lon1: float, lat1: float, lon2: float, lat2: float) -> float:
    """``geohashGetDistance``: the haversine distance in metres."""
    v = math.sin((lon2 * D_R - lon1 * D_R) / 2)
    if v == 0.0:
        return lat_distance(lat1, lat2)
    lat1r, lat2r = lat1 * D_R, lat2 * D_R
    u = math.sin((lat2r - lat1r) / 2)
    a = u * u + math.cos(lat1r) * math.cos(lat2r) * v * v
    return 2.0 * EARTH_RADIUS_M * math.asin(math.sqrt(a))


class Shape:
    """The search: centre, radius or box (in the unit given), the unit's metres."""

    def __init__(self) -> None:
        self.xy = (0.0, 0.0)
        self.radius: float | None = None
        self.box = (0.0, 0.0)  # width, height
        self.conversion = 1.0

    def within(self, score: float) -> float | None:
        """``geoWithinShape``: the distance in metres to a member inside, else None."""
        lon, lat = decode_score(score)
        x, y = self.xy
        if self.radius is not None:
            found = distance(x, y, lon, lat)
            return found if found <= self.radius * self.conversion else None
        width, height = self.box[0] * self.conversion, self.box[1] * self.conversion
        if lat_distance(lat, y) > height / 2 or distance(lon, lat, x, lat) > width / 2:
            return None
        return distance(x, y, lon, lat)

    def boxes(self) -> list[Hash]:
        """``geohashCalculateAreasByShapeWGS84``: the centre box and its neighbours, in
        Redis's order (centre, N, S, E, W, NE, NW, SE, SW); excluded ones are (0, 0)."""
        x, y = self.xy
        if self.radius is not None:
            height = width = self.conversion * self.radius
            radius_m = self.radius
        else:
            half_width, half_height = self.box[0] / 2, self.box[1] / 2
            width, height = self.conversion * half_width, self.conversion * half_height
            radius_m = math.sqrt(half_width * half_width + half_height * half_height)
        radius_m *= self.conversion
        lat_delta = height / EARTH_RADIUS_M / D_R
        top = width / EARTH_RADIUS_M / math.cos((y + lat_delta) * D_R) / D_R
        bottom = width / EARTH_RADIUS_M / math.cos((y - lat_delta) * D_R) / D_R
        south = y < 0
        min_lon, max_lon = (x - bottom, x + bottom) if south else (x - top, x + top)
        min_lat, max_lat = y - lat_delta, y + lat_delta
        step = _steps(radius_m, y)
        centre = encode(x, y, step)
        around = _neighbours(centre)
        north, south_box, east, west = (_area(around[k]) for k in range(4))
        if step > 1 and (
            north[3] < max_lat or south_box[2] > min_lat or east[1] < max_lon or west[0] > min_lon
        ):
            step -= 1
            centre = encode(x, y, step)
            around = _neighbours(centre)
        area = _area(centre)
        n, s, e, w, ne, nw, se, sw = around
        if step >= 2:
            if area[2] < min_lat:
                s = sw = se = (0, 0)
            if area[3] > max_lat:
                n = ne = nw = (0, 0)
            if area[0] < min_lon:
                w = sw = nw = (0, 0)
            if area[1] > max_lon:
                e = se = ne = (0, 0)
        return [centre, n, s, e, w, ne, nw, se, sw]


def _neighbours(hashed: Hash) -> list[Hash]:
    """N, S, E, W, NE, NW, SE, SW."""
    moves = [(0, 1), (0, -1), (1, 0), (-1, 0), (1, 1), (-1, 1), (1, -1), (-1, -1)]
    return [_move(hashed, dx, dy) for dx, dy in moves]


def _steps(range_m: float, latitude: float) -> int:
    """``geohashEstimateStepsByRadius``."""
    if range_m == 0:
        return 26
    step = 1
    while range_m < MERCATOR_MAX:
        range_m *= 2
        step += 1
    step -= 2
    if latitude > 66 or latitude < -66:
        step -= 1
        if latitude > 80 or latitude < -80:
            step -= 1
    return min(max(step, 1), 26)


def search(zset: SortedSet, shape: Shape, limit: int) -> list[tuple[bytes, float, float]]:
    """``membersOfAllNeighbors``: (member, distance in metres, score) in box order; at most
    ``limit`` when it is not 0."""
    found: list[tuple[bytes, float, float]] = []
    boxes = shape.boxes()
    items = zset.items()
    last = 0
    for i, (bits, step) in enumerate(boxes):
        if bits == 0 and step == 0:
            continue
        if last and (bits, step) == boxes[last]:
            continue  # a huge radius makes neighbours repeat
        if found and limit and len(found) >= limit:
            break
        low, high = bits << (52 - step * 2), (bits + 1) << (52 - step * 2)
        for member, score in items:
            if score < low:
                continue
            if score >= high:
                break
            meters = shape.within(score)
            if meters is not None:
                found.append((member, meters, score))
            if found and limit and len(found) >= limit:
                break
        last = i
    return found


def pqsort(items: list[Any], cmp: Callable[[Any, Any], int], left: int, right: int) -> None:
    """Redis's partial quicksort (src/pqsort.c, after NetBSD's qsort): sorts ``items`` in
    place well enough that positions ``left..right`` hold what a full sort puts there, with
    Redis's exact order among equal items (it is not stable)."""

    def swap(i: int, j: int) -> None:
        items[i], items[j] = items[j], items[i]

    def vecswap(i: int, j: int, n: int) -> None:
        for k in range(n):
            swap(i + k, j + k)

    def med3(a: int, b: int, c: int) -> int:
        if cmp(items[a], items[b]) < 0:
            return b if cmp(items[b], items[c]) < 0 else (c if cmp(items[a], items[c]) < 0 else a)
        return b if cmp(items[b], items[c]) > 0 else (a if cmp(items[a], items[c]) < 0 else c)

    def sort(a: int, n: int) -> None:
        while True:
            if n < 7:
                for m in range(a + 1, a + n):
                    k = m
                    while k > a and cmp(items[k - 1], items[k]) > 0:
                        swap(k, k - 1)
                        k -= 1
                return
            pm = a + n // 2
            if n > 7:
                pl, pn = a, a + n - 1
                if n > 40:
                    d = n // 8
                    pl, pm = med3(pl, pl + d, pl + 2 * d), med3(pm - d, pm, pm + d)
                    pn = med3(pn - 2 * d, pn - d, pn)
                pm = med3(pl, pm, pn)
            swap(a, pm)
            pa = pb = a + 1
            pc = pd = a + n - 1
            while True:
                while pb <= pc and (result := cmp(items[pb], items[a])) <= 0:
                    if result == 0:
                        swap(pa, pb)
                        pa += 1
                    pb += 1
                while pb <= pc and (result := cmp(items[pc], items[a])) >= 0:
                    if result == 0:
                        swap(pc, pd)
                        pd -= 1
                    pc -= 1
                if pb > pc:
                    break
                swap(pb, pc)
                pb, pc = pb + 1, pc - 1
            pn = a + n
            r = min(pa - a, pb - pa)
            vecswap(a, pb - r, r)
            r = min(pd - pc, pn - pd - 1)
            vecswap(pb, pn - r, r)
            r = pb - pa
            if r > 1 and not ((left < a and right < a) or (left > a + r - 1 and right > a + r - 1)):
                sort(a, r)
            r = pd - pc
            if r <= 1:
                return
            a, n = pn - r, r
            if (left < a and right < a) or (left > a + r - 1 and right > a + r - 1):
                return

    sort(0, len(items))


def _float(value: bytes, message: str | None = None) -> float:
    return parse.score(value, message or parse.NOT_FLOAT)


def _lonlat(longitude: bytes, latitude: bytes) -> tuple[float, float]:
    xy = (_float(longitude), _float(latitude))
    if not (LONG_MIN <= xy[0] <= LONG_MAX and LAT_MIN <= xy[1] <= LAT_MAX):
        raise CommandError(f"ERR invalid longitude,latitude pair {xy[0]:f},{xy[1]:f}")
    return xy


def _unit(value: bytes) -> float:
    unit = _UNITS.get(value.upper())
    if unit is None:
        raise CommandError("ERR unsupported unit provided. please use M, KM, FT, MI")
    return unit


def _radius(shape: Shape, amount: bytes, unit: bytes) -> None:
    radius = _float(amount, "ERR need numeric radius")
    if radius < 0:
        raise CommandError("ERR radius cannot be negative")
    shape.radius, shape.conversion = radius, _unit(unit)


def _member_xy(entry: Entry, member: bytes) -> tuple[float, float]:
    score = entry.value.scores.get(member)
    if score is None:
        raise CommandError("ERR could not decode requested zset member")
    return decode_score(score)


def cmd_geo(acc: Access, db: int, argv: list[bytes]) -> Any:
    name = argv[0].upper()
    searchstore = name == b"GEOSEARCHSTORE"
    parse.arity(argv, -8 if searchstore else -6 if name == b"GEORADIUS" else -5)
    source = 2 if searchstore else 1
    entry = acc.get(db, argv[source], ZSET)
    shape = Shape()
    store: bytes | None = argv[1] if searchstore else None
    if name == b"GEORADIUS":
        base = 6
        shape.xy = _lonlat(argv[2], argv[3])
        _radius(shape, argv[4], argv[5])
    elif name == b"GEORADIUSBYMEMBER":
        base = 5
        if entry is not None:
            shape.xy = _member_xy(entry, argv[2])
            _radius(shape, argv[3], argv[4])
    else:
        base = 3
    storedist = with_options = any_ = False
    sort: bool | None = None  # True: descending
    count, frommember, fromloc, byradius, bybox = 0, False, False, False, False
    i = base
    while i < len(argv):
        option, left = argv[i].upper(), len(argv) - i - 1
        if option in (b"WITHDIST", b"WITHHASH", b"WITHCOORD"):
            with_options = True
        elif option == b"ANY":
            any_ = True
        elif option in (b"ASC", b"DESC"):
            sort = option == b"DESC"
        elif option == b"COUNT" and left >= 1:
            count = parse.integer(argv[i + 1])
            if count <= 0:
                raise CommandError("ERR COUNT must be > 0")
            i += 1
        elif option in (b"STORE", b"STOREDIST") and left >= 1 and not searchstore:
            store, storedist = argv[i + 1], option == b"STOREDIST"
            i += 1
        elif option == b"STOREDIST" and searchstore:
            storedist = True
        elif option == b"FROMMEMBER" and left >= 1 and searchstore and not fromloc:
            if entry is not None:
                shape.xy = _member_xy(entry, argv[i + 1])
            frommember, i = True, i + 1
        elif option == b"FROMLONLAT" and left >= 2 and searchstore and not frommember:
            shape.xy = _lonlat(argv[i + 1], argv[i + 2])
            fromloc, i = True, i + 2
        elif option == b"BYRADIUS" and left >= 2 and searchstore and not bybox:
            _radius(shape, argv[i + 1], argv[i + 2])
            byradius, i = True, i + 2
        elif option == b"BYBOX" and left >= 3 and searchstore and not byradius:
            width = _float(argv[i + 1], "ERR need numeric width")
            height = _float(argv[i + 2], "ERR need numeric height")
            if width < 0 or height < 0:
                raise CommandError("ERR height or width cannot be negative")
            shape.box, shape.conversion = (width, height), _unit(argv[i + 3])
            bybox, i = True, i + 3
        else:
            raise CommandError(parse.SYNTAX)
        i += 1
    if store is not None and with_options:
        what = "GEOSEARCHSTORE" if searchstore else "STORE option in GEORADIUS"
        raise CommandError(
            f"ERR {what} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"
        )
    command = argv[0].decode(errors="replace")
    if searchstore and not (frommember or fromloc):
        raise CommandError(
            f"ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {command}"
        )
    if searchstore and not (byradius or bybox):
        raise CommandError(f"ERR exactly one of BYRADIUS and BYBOX can be specified for {command}")
    if any_ and not count:
        raise CommandError("ERR the ANY argument requires COUNT argument")
    if entry is None:
        if store is not None:
            store_result(acc, db, store, None)
            return 0
        return []
    if count and sort is None and not any_:
        sort = False
    found = search(entry.value, shape, count if any_ else 0)
    if sort is not None:  # glibc's qsort (a stable merge sort), or Redis's pqsort for COUNT
        sign = -1 if sort else 1
        if count and count < len(found):
            pqsort(found, lambda p, q: sign * ((p[1] > q[1]) - (p[1] < q[1])), 0, count - 1)
        else:
            found.sort(key=lambda point: point[1], reverse=sort)
    found = found[:count] if count else found
    if store is None:
        return [member for member, _, _ in found]
    scores = {m: (meters / shape.conversion if storedist else s) for m, meters, s in found}
    store_result(acc, db, store, Entry(ZSET, SortedSet(scores)) if scores else None)
    return len(found)


def cmd_geoadd(acc: Access, db: int, argv: list[bytes]) -> Any:
    """GEOADD: ZADD (its NX/XX/CH) of each member at the 52-bit geohash of its position."""
    parse.arity(argv, -5)
    first = 2
    while first < len(argv) and argv[first].upper() in (b"NX", b"XX", b"CH"):
        first += 1
    options = {option.upper() for option in argv[2:first]}
    if (len(argv) - first) % 3 or {b"NX", b"XX"} <= options:
        raise CommandError(parse.SYNTAX)
    zadd = [b"ZADD", *argv[1:first]]
    for i in range(first, len(argv), 3):
        bits, _ = encode(*_lonlat(argv[i], argv[i + 1]), STEP_MAX)
        zadd += [b"%d" % bits, argv[i + 2]]
    return cmd_zadd(acc, db, zadd)


def _geo_keys(argv: list[bytes]) -> list[int]:
    """The source and the store destination (``georadiusGetKeys``: the last STORE/STOREDIST)."""
    if argv[0].upper() == b"GEOSEARCHSTORE":
        return [1, 2]
    store = None
    for i in range(2, len(argv) - 1):
        if argv[i].upper() in (b"STORE", b"STOREDIST"):
            store = i + 1
    return [1] if store is None else [1, store]


COMMANDS: dict[bytes, tuple[Callable[[Access, int, list[bytes]], Any], Any]] = {
    b"GEOADD": (cmd_geoadd, [1]),
    b"GEORADIUS": (cmd_geo, _geo_keys),
    b"GEORADIUSBYMEMBER": (cmd_geo, _geo_keys),
    b"GEOSEARCHSTORE": (cmd_geo, _geo_keys),
}
"""Name -> (handler, key positions: a function of argv giving them)."""
