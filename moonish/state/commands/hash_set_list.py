"""Hash, set and list commands: HSET, HSETNX, HMSET, HDEL, HINCRBY, HINCRBYFLOAT; SADD, SREM,
SPOP, SMOVE, SINTERSTORE, SUNIONSTORE, SDIFFSTORE; LPUSH, RPUSH, LPUSHX, RPUSHX, LPOP, RPOP,
LSET, LREM, LTRIM, LINSERT, LMOVE, RPOPLPUSH (semantics of Redis 7.0, redis.io/commands).

Hash fields with expiry times (Redis 7.4 ``t_hash.c``, moonish.state.fieldttl): HSET and
HMSET remove the times of the fields they set, HDEL removes fields whatever their time;
HSETNX, HINCRBY and HINCRBYFLOAT look the field up, which removes it first when it has
expired, and HINCRBY/HINCRBYFLOAT keep the time of a field they change
(``HASH_SET_KEEP_TTL``); HSETNX's new field has none."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from typing import Any

from moonish.errors import CommandError
from moonish.state.commands import parse
from moonish.state.fieldttl import clear_ttls
from moonish.state.keyspace import Access
from moonish.values.model import HASH, LIST, SET, Entry

# -- hashes --------------------------------------------------------------------------------


def cmd_hset(acc: Access, db: int, argv: list[bytes]) -> Any:
    if len(argv) < 4 or len(argv) % 2 == 1:
        name = argv[0].decode(errors="replace").lower()
        raise CommandError(f"ERR wrong number of arguments for '{name}' command")
    key = argv[1]
    entry = acc.get(db, key, HASH)
    if len(argv) == 4 and entry is not None and entry.field_expire_at_ms is None:
        old = entry.value.get(argv[2])  # most HSETs: one field of a hash without field TTLs
        _hash_update(acc, db, key, entry, argv[2], argv[3])
        return b"OK" if len(argv[0]) == 5 else int(old is None)  # HMSET (5 letters) or HSET
    fields = dict(zip(argv[2::2], argv[3::2], strict=True))
    if entry is None:
        acc.put(db, key, Entry(HASH, fields))
        added = len(fields)
    else:
        current = entry.value
        added, grew = 0, 0
        for field, value in fields.items():
            old = current.get(field)
            if old is None:
                added += 1
                grew += len(field) + len(value)
            else:
                grew += len(value) - len(old)
        current.update(fields)
        if entry.field_expire_at_ms is not None:
            clear_ttls(entry, fields)
        acc.changed(db, key, entry, grew)
    return b"OK" if argv[0].upper() == b"HMSET" else added


def cmd_hsetnx(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, 4)
    key, field = argv[1], argv[2]
    current, entry = acc.hash_field(db, key, acc.get(db, key, HASH), field)
    if current is not None:
        return 0
    if entry is None:
        acc.put(db, key, Entry(HASH, {field: argv[3]}))
        return 1
    old = entry.value.get(field)  # an expired field still there while loading an AOF
    entry.value[field] = argv[3]
    clear_ttls(entry, [field])
    grew = len(argv[3]) - len(old) if old is not None else len(field) + len(argv[3])
    acc.changed(db, key, entry, grew)
    return 1


def cmd_hdel(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, -3)
    entry = acc.get(db, argv[1], HASH)
    if entry is None:
        return 0
    removed = grew = 0
    for field in argv[2:]:
        value = entry.value.pop(field, None)
        if value is not None:
            removed += 1
            grew -= len(field) + len(value)
    if removed:
        if entry.field_expire_at_ms is not None:
            clear_ttls(entry, argv[2:])
        acc.changed(db, argv[1], entry, grew)
    return removed


def _hash_update(
    acc: Access, db: int, key: bytes, entry: Entry | None, field: bytes, value: bytes
) -> None:
    if entry is None:
        acc.put(db, key, Entry(HASH, {field: value}))
    else:
        old = entry.value.get(field)
        grew = len(value) - len(old) if old is not None else len(field) + len(value)
        entry.value[field] = value
        acc.changed(db, key, entry, grew)


def cmd_hincrby(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, 4)
    increment = parse.integer(argv[3])  # parsed before the lookup, as Redis does
    current, entry = acc.hash_field(db, argv[1], acc.get(db, argv[1], HASH), argv[2])
    base = 0 if current is None else parse.integer(current, "ERR hash value is not an integer")
    total = parse.add_int(base, increment)
    _hash_update(acc, db, argv[1], entry, argv[2], b"%d" % total)
    return total


def cmd_hincrbyfloat(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, 4)
    increment = parse.decimal(argv[3])
    if increment.exact is None:  # Redis checks this before the key (t_hash.c)
        raise CommandError("ERR value is NaN or Infinity")
    current, entry = acc.hash_field(db, argv[1], acc.get(db, argv[1], HASH), argv[2])
    base = parse.decimal(b"0" if current is None else current, "ERR hash value is not a float")
    value = parse.add_decimal(base, increment)
    _hash_update(acc, db, argv[1], entry, argv[2], value)
    return value


# -- sets ----------------------------------------------------------------------------------


def cmd_sadd(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, -3)
    entry = acc.get(db, argv[1], SET)
    members = set(argv[2:])
    if entry is None:
        acc.put(db, argv[1], Entry(SET, members))
        return len(members)
    new = members - entry.value
    if new:
        entry.value |= new
        acc.changed(db, argv[1], entry, sum(map(len, new)))
    return len(new)


def cmd_srem(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, -3)
    entry = acc.get(db, argv[1], SET)
    if entry is None:
        return 0
    gone = entry.value & set(argv[2:])
    if gone:
        entry.value -= gone
        acc.changed(db, argv[1], entry, -sum(map(len, gone)))
    return len(gone)


def cmd_spop(acc: Access, db: int, argv: list[bytes]) -> Any:
    """Pops random members; logged as ``SREM key member...``, as Redis propagates it."""
    if len(argv) not in (2, 3):
        parse.arity(argv, 2)  # raises
    count = parse.count_arg(argv[2]) if len(argv) == 3 else None
    entry = acc.get(db, argv[1], SET)
    if entry is None or count == 0:
        return None if count is None else []
    members = random.sample(sorted(entry.value), min(count or 1, len(entry.value)))
    entry.value.difference_update(members)
    acc.changed(db, argv[1], entry, -sum(map(len, members)))
    acc.log_argv = [b"SREM", argv[1], *members]
    return members[0] if count is None else members


def cmd_smove(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, 4)
    source = acc.get(db, argv[1])
    if source is None:
        return 0  # before any type check, as Redis does
    source = acc.get(db, argv[1], SET)
    destination = acc.get(db, argv[2], SET)
    member = argv[3]
    if source is None or member not in source.value:
        return 0
    if argv[1] == argv[2]:
        return 1
    source.value.discard(member)
    acc.changed(db, argv[1], source)
    if destination is None:
        acc.put(db, argv[2], Entry(SET, {member}))
    elif member not in destination.value:
        destination.value.add(member)
        acc.changed(db, argv[2], destination)
    return 1


def store_result(acc: Access, db: int, key: bytes, entry: Entry | None) -> None:
    """``setKey`` of a *STORE command's result: ``key`` (of any type) is replaced, without
    expiry; an empty result (``None``) deletes it instead, as Redis does."""
    if acc.get(db, key) is not None and entry is None:
        acc.remove(db, key)
    elif entry is not None:
        acc.put(db, key, entry)


def cmd_setstore(acc: Access, db: int, argv: list[bytes]) -> Any:
    """SINTERSTORE, SUNIONSTORE, SDIFFSTORE: every source is looked up (WRONGTYPE for any
    that is not a set) before anything is written; a missing source is an empty set."""
    parse.arity(argv, -3)
    sources = []
    for key in argv[2:]:
        entry = acc.get(db, key, SET)
        sources.append(None if entry is None else entry.value)
    name = argv[0].upper()
    result: set[bytes]
    if name == b"SINTERSTORE":
        present = [s for s in sources if s is not None]
        result = set.intersection(*present) if len(present) == len(sources) else set()
    elif name == b"SUNIONSTORE":
        result = set().union(*(s for s in sources if s is not None))
    else:
        result = set(sources[0] or ()).difference(*(s for s in sources[1:] if s is not None))
    store_result(acc, db, argv[1], Entry(SET, result) if result else None)
    return len(result)


# -- lists ---------------------------------------------------------------------------------


def cmd_push(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, -3)
    name = argv[0].upper()
    entry = acc.get(db, argv[1], LIST)
    if entry is None:
        if name.endswith(b"X"):
            return 0
        entry = Entry(LIST, deque())
        acc.put(db, argv[1], entry)
    items: deque[bytes] = entry.value
    if len(argv) == 3:  # most pushes: one element
        element = argv[2]
        if name.startswith(b"L"):
            items.appendleft(element)
        else:
            items.append(element)
        acc.changed(db, argv[1], entry, len(element))
        return len(items)
    if name.startswith(b"L"):
        items.extendleft(argv[2:])  # each element onto the head in turn, as Redis pushes them
    else:
        items.extend(argv[2:])
    acc.changed(db, argv[1], entry, sum(map(len, argv[2:])))
    return len(items)


def cmd_pop(acc: Access, db: int, argv: list[bytes]) -> Any:
    if len(argv) not in (2, 3):
        parse.arity(argv, 2)  # raises
    count = parse.count_arg(argv[2]) if len(argv) == 3 else None
    entry = acc.get(db, argv[1], LIST)
    if entry is None:
        return None
    if count == 0:
        return []
    items: deque[bytes] = entry.value
    take = items.popleft if argv[0].upper() == b"LPOP" else items.pop
    if count is None:  # most pops: one element, replied alone
        element = take()
        acc.changed(db, argv[1], entry, -len(element))
        return element
    popped = [take() for _ in range(min(count, len(items)))]
    acc.changed(db, argv[1], entry, -sum(map(len, popped)))
    return popped


def _index(items: deque[bytes], index: int) -> int:
    return index + len(items) if index < 0 else index


def cmd_lset(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, 4)
    entry = acc.get(db, argv[1], LIST)
    if entry is None:
        raise CommandError("ERR no such key")
    index = parse.integer(argv[2])
    position = _index(entry.value, index)
    if not 0 <= position < len(entry.value):
        raise CommandError("ERR index out of range")
    items: deque[bytes] = entry.value
    old = items[position]  # a deque reaches an index from its nearer end
    items[position] = argv[3]
    acc.changed(db, argv[1], entry, len(argv[3]) - len(old))
    return b"OK"


def cmd_lrem(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, 4)
    count = parse.integer(argv[2])
    entry = acc.get(db, argv[1], LIST)
    if entry is None:
        return 0
    items: deque[bytes] = entry.value
    element = argv[3]
    positions = [i for i, item in enumerate(items) if item == element]
    if count > 0:
        positions = positions[:count]
    elif count < 0:
        positions = positions[count:]
    if not positions:
        return 0
    gone = set(positions)  # one pass to rebuild: O(N) however many go, as in Redis
    entry.value = deque(item for i, item in enumerate(items) if i not in gone)
    acc.changed(db, argv[1], entry, -len(element) * len(positions))
    return len(positions)


def cmd_ltrim(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, 4)
    start, stop = parse.integer(argv[2]), parse.integer(argv[3])
    entry = acc.get(db, argv[1], LIST)
    if entry is None:
        return b"OK"
    items: deque[bytes] = entry.value
    size = len(items)
    start, stop = max(_index(items, start), 0), _index(items, stop)
    removed = 0
    if start > stop or start >= size:
        items.clear()
    else:  # pops at both ends: O(elements removed), as Redis's LTRIM
        for _ in range(start):
            removed += len(items.popleft())
        for _ in range(size - 1 - min(stop, size - 1)):
            removed += len(items.pop())
    if len(items) != size:
        acc.changed(db, argv[1], entry, -removed if items else None)
    return b"OK"


def cmd_linsert(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, 5)
    where = argv[2].upper()
    if where not in (b"BEFORE", b"AFTER"):
        raise CommandError(parse.SYNTAX)
    entry = acc.get(db, argv[1], LIST)
    if entry is None:
        return 0
    items: deque[bytes] = entry.value
    try:
        position = items.index(argv[3])
    except ValueError:
        return -1
    items.insert(position + (where == b"AFTER"), argv[4])
    acc.changed(db, argv[1], entry, len(argv[4]))
    return len(items)


def cmd_lmove(acc: Access, db: int, argv: list[bytes]) -> Any:
    if argv[0].upper() == b"RPOPLPUSH":
        parse.arity(argv, 3)
        wherefrom, whereto = b"RIGHT", b"LEFT"
    else:
        parse.arity(argv, 5)
        wherefrom, whereto = argv[3].upper(), argv[4].upper()
        if not {wherefrom, whereto} <= {b"LEFT", b"RIGHT"}:
            raise CommandError(parse.SYNTAX)
    source = acc.get(db, argv[1], LIST)
    if source is None:
        return None
    destination = acc.get(db, argv[2], LIST)
    items: deque[bytes] = source.value
    element = items.popleft() if wherefrom == b"LEFT" else items.pop()
    if destination is source:  # rotating a list onto itself
        _push(items, whereto, element)
        acc.changed(db, argv[1], source, 0)
        return element
    acc.changed(db, argv[1], source, -len(element))
    if destination is None:
        acc.put(db, argv[2], Entry(LIST, deque([element])))
    else:
        _push(destination.value, whereto, element)
        acc.changed(db, argv[2], destination, len(element))
    return element


def _push(items: deque[bytes], whereto: bytes, element: bytes) -> None:
    if whereto == b"LEFT":
        items.appendleft(element)
    else:
        items.append(element)


COMMANDS: dict[bytes, tuple[Callable[[Access, int, list[bytes]], Any], Any]] = {
    b"HSET": (cmd_hset, [1]),
    b"HMSET": (cmd_hset, [1]),
    b"HSETNX": (cmd_hsetnx, [1]),
    b"HDEL": (cmd_hdel, [1]),
    b"HINCRBY": (cmd_hincrby, [1]),
    b"HINCRBYFLOAT": (cmd_hincrbyfloat, [1]),
    b"SADD": (cmd_sadd, [1]),
    b"SREM": (cmd_srem, [1]),
    b"SPOP": (cmd_spop, [1]),
    b"SMOVE": (cmd_smove, [1, 2]),
    b"SINTERSTORE": (cmd_setstore, "all"),
    b"SUNIONSTORE": (cmd_setstore, "all"),
    b"SDIFFSTORE": (cmd_setstore, "all"),
    b"LPUSH": (cmd_push, [1]),
    b"RPUSH": (cmd_push, [1]),
    b"LPUSHX": (cmd_push, [1]),
    b"RPUSHX": (cmd_push, [1]),
    b"LPOP": (cmd_pop, [1]),
    b"RPOP": (cmd_pop, [1]),
    b"LSET": (cmd_lset, [1]),
    b"LREM": (cmd_lrem, [1]),
    b"LTRIM": (cmd_ltrim, [1]),
    b"LINSERT": (cmd_linsert, [1]),
    b"LMOVE": (cmd_lmove, [1, 2]),
    b"RPOPLPUSH": (cmd_lmove, [1, 2]),
}
