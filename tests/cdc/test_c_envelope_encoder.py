"""The C encoder of kv_change envelopes (moonish/cdc/_cenvelope.c) against the Python encoder
(moonish.cdc.envelope with the C one switched off): for runs of any kv_change records, snapshot
rows, an RDB load's rows (with its shard's and the whole load's first and last marks, in a
shard's read and in a merged read), batches, records of a disabled stream, images with omitted
values, commands that need escaping, damaged payloads and other record types among them, the
same ops, the same envelope bytes and the same errors. A pure build has no C extension: the
module is skipped there."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moonish.cdc import envelope
from moonish.cdc.envelope import FLAG_SNAPSHOT, EnvelopeEncoder
from moonish.clock import FixedClock
from moonish.errors import CorruptionError
from moonish.log.format import FLAG_BATCH
from moonish.log.frames import Frame
from moonish.log.payloads import encode_payload
from moonish.log.records import _ROW_FLAGS, KvChange, KvCommand, Message, Replay, ViewType
from tests.support.scale import scaled

pytestmark = pytest.mark.skipif(
    envelope._ENCODE_CHANGES is None, reason="a pure build has no C extension"
)

NOW_US = 1_796_000_000_123_456
_blobs = st.binary(max_size=30)
images = st.one_of(
    st.just(b""),
    st.binary(max_size=80),
    st.sampled_from(
        [
            b'{"db":0,"key":"k","type":"string","value":"v","expire_at_ms":null}',
            b'{"db":0,"key":"k","type":"list","value":{"_omitted_length":9000},'
            b'"expire_at_ms":null}',
            b'{"db":1,"key":"k","type":"hash","value":{"_omitted_length":7},"expire_at_ms":5}',
            b'{"db":1,"key":"k","type":"set","value":{"_omitted_length":70},"expire_at_ms":-3}',
            b'{"value":{"_omitted_length":3},"x":1}',
            b'{"v":{"_omitted_length":3},"expire_at_ms":null}',
            b'{"value":{"_omitted_length":},"expire_at_ms":null}',
        ]
    ),
)
command_names = st.one_of(
    st.sampled_from([b"", b"SET", b"HSET", b"DEL", b"set", b"RESYNC", b'"Q"', b"a\\b"]),
    _blobs,
)


def _valid(change: KvChange) -> KvChange:
    """``change`` as the writer makes it: a state only to replay, argv only to run, a row
    only with op ``r``."""
    return change._replace(
        state=change.state if change.replay == Replay.STATE else b"",
        argv=(change.argv or (b"SET",)) if change.replay == Replay.COMMAND else (),
        row=change.row if change.op == "r" else "",
    )


changes = st.builds(
    KvChange,
    op=st.sampled_from("cudr"),
    db=st.integers(0, 65535),
    command=command_names,
    key=_blobs,
    before=images,
    after=images,
    view=st.sampled_from(list(ViewType)),
    expired=st.booleans(),
    replay=st.sampled_from(list(Replay)),
    state=_blobs,
    argv=st.lists(_blobs, max_size=3).map(tuple),
    loading=st.booleans(),
    source=st.binary(max_size=10),
    row=st.sampled_from(sorted(_ROW_FLAGS)),
).map(_valid)
others = st.one_of(
    st.builds(KvCommand, st.integers(0, 15), st.just((b"SET", b"k", b"v")), st.just(1)),
    st.builds(Message, st.just("moonish.skipped"), _blobs, st.integers(0, 15)),
)


def _frames(
    records: list[KvChange | KvCommand | Message],
    shape: list[tuple[int, int]],
    seed: int,
    first_lsn: int,
    commit_us: int,
) -> list[Frame]:
    """Frames of ``records``: each given a batch shape ``(index, size)`` and frame flags
    (none, FLAG_BATCH, FLAG_SNAPSHOT), some payloads damaged."""
    rng = random.Random(seed)
    frames = []
    for i, record in enumerate(records):
        rtype, payload = encode_payload(record)
        if rng.random() < 0.1:  # damaged: cut, flipped or extended
            at = rng.randrange(len(payload) + 1)
            payload = rng.choice(
                [payload[:at], payload[:at] + b"\xff" + payload[at + 1 :], payload + b"\x00"]
            )
        elif rng.random() < 0.1:  # a head field out of range or at odds with the others
            at = rng.randrange(min(8, len(payload)))
            payload = payload[:at] + bytes([rng.randrange(6)]) + payload[at + 1 :]
        index, size = shape[i % len(shape)]
        flags = rng.choice([0, FLAG_BATCH, FLAG_SNAPSHOT]) if size > 1 else rng.choice([0, 0x80])
        frames.append(
            Frame(first_lsn + i, int(rtype), flags, index, size, commit_us, payload, 40 * i)
        )
    return frames


def _encode(
    frames: list[Frame], transactions: bool, merged: bool = False
) -> tuple[list[str], list[bytes]] | str:
    encoder = EnvelopeEncoder(
        7, "srv", FixedClock(NOW_US), transactions=transactions, merged=merged
    )
    try:
        batch = encoder.encode(frames)
    except CorruptionError as error:
        return f"{error} @ {error.lsn} {error.offset}"
    return list(batch.ops), list(batch.envelopes)


@settings(max_examples=scaled(400), deadline=None)
@given(
    records=st.lists(st.one_of(changes, changes, changes, others), min_size=1, max_size=8),
    shape=st.lists(
        st.integers(1, 4).flatmap(lambda n: st.tuples(st.integers(0, n - 1), st.just(n))),
        min_size=1,
        max_size=3,
    ),
    seed=st.integers(0, 2**32),
    first_lsn=st.integers(1, 2**62),
    commit_us=st.one_of(st.integers(-(2**40), 2**53), st.sampled_from([0, 999, 1000])),
    transactions=st.booleans(),
    merged=st.booleans(),
)
@pytest.mark.slow
def test_the_c_encoder_gives_the_python_encoders_envelopes(
    records: list[KvChange | KvCommand | Message],
    shape: list[tuple[int, int]],
    seed: int,
    first_lsn: int,
    commit_us: int,
    transactions: bool,
    merged: bool,
) -> None:
    frames = _frames(records, shape, seed, first_lsn, commit_us)
    got = _encode(frames, transactions, merged)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(envelope, "_ENCODE_CHANGES", None)
        expected = _encode(frames, transactions, merged)
    assert got == expected


@pytest.mark.parametrize("merged", [False, True])
def test_the_c_encoder_marks_every_row_of_a_load_as_the_python_encoder(merged: bool) -> None:
    """Each row name (its shard's and the whole load's place) once, C and Python."""
    rows = [
        KvChange("r", 0, b"RDB", b"k", b"", b'{"v":1}', ViewType.NEW_IMAGE, row=row)
        for row in sorted(_ROW_FLAGS)
    ]
    frames = [
        Frame(i + 1, 5, 0, 0, 1, 10, encode_payload(row)[1], 40 * i) for i, row in enumerate(rows)
    ]
    got = _encode(frames, False, merged)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(envelope, "_ENCODE_CHANGES", None)
        expected = _encode(frames, False, merged)
    assert got == expected
    assert not isinstance(got, str)
    marks = [envelope.split(b'"snapshot":"')[1].split(b'"')[0] for envelope in got[1]]
    names = sorted(_ROW_FLAGS)  # "", first, first+load_first, last, last+load_last, only, ...
    if merged:
        assert dict(zip(names, marks, strict=True)) == {
            "": b"true",
            "first": b"first_in_data_collection",
            "first+load_first": b"first",
            "last": b"last_in_data_collection",
            "last+load_last": b"last",
            "only": b"last_in_data_collection",
            "only+load_first": b"first",
            "only+load_last": b"last",
            "only+load_only": b"last",
        }
    else:  # a shard's own read: its shard's first and last, whatever the load's
        assert dict(zip(names, marks, strict=True)) == {
            "": b"true",
            "first": b"first",
            "first+load_first": b"first",
            "last": b"last",
            "last+load_last": b"last",
            "only": b"last",
            "only+load_first": b"last",
            "only+load_last": b"last",
            "only+load_only": b"last",
        }


def test_the_c_encoder_takes_the_usual_records_and_leaves_the_rest() -> None:
    change = KvChange(
        "u",
        0,
        b"SET",
        b"k",
        b'{"v":1}',
        b'{"v":2}',
        ViewType.NEW_AND_OLD_IMAGES,
        False,
        Replay.NONE,
        b"",
        (),
        False,
        b"",
        "",
    )
    payload = encode_payload(change)[1]
    frames = [
        Frame(1, 5, 0, 0, 1, 10, payload, 0),
        Frame(2, 5, 0, 0, 1, 10, payload, 40),
        Frame(3, 1, 0, 0, 1, 10, encode_payload(KvCommand(0, (b"SET", b"k", b"v"), 1))[1], 80),
        Frame(4, 5, 0, 0, 1, 10, payload, 120),
    ]
    ops: list[str] = []
    envelopes: list[bytes] = []
    stop = envelope._ENCODE_CHANGES(
        frames, 0, ops, envelopes, b',"source":{"ts_ms":', b"}", 7, False
    )
    assert (stop, ops, len(envelopes)) == (2, ["u", "u"], 2)  # the kv record is Python's
    assert envelope._ENCODE_CHANGES(frames, 3, ops, envelopes, b"", b"}", 7, False) == 4
    assert ops == ["u", "u", "u"] and envelopes[0].startswith(b'{"before":{"v":1},"after":{"v":2}')


def _base(**fields: object) -> KvChange:
    record = KvChange(
        "u",
        3,
        b"SET",
        b"k",
        b'{"v":1}',
        b'{"v":2}',
        ViewType.NEW_AND_OLD_IMAGES,
        False,
        Replay.NONE,
        b"",
        (),
        False,
        b"",
        "",
    )
    return record._replace(**fields)


BASES = [
    _base(),
    _base(replay=Replay.STATE, state=b"xx"),
    _base(replay=Replay.COMMAND, argv=(b"SET", b"k", b"v")),
    _base(source=b"pos"),
    _base(op="r", row="first", command=b""),
    _base(expired=True, op="d", after=b""),
]


@pytest.mark.parametrize("base", range(len(BASES)))
def test_every_head_field_out_of_range_is_left_to_python(base: int) -> None:
    """Each byte of the payload's head set to values that break a rule of the grammar (op,
    flags, view, replay, reserved, and their combinations with state, argv, source and rows):
    the C encoder gives what the Python encoder gives, an envelope or the same error."""
    payload = encode_payload(BASES[base])[1]
    values = [0, 1, 2, 3, 4, 5, 8, 16, 32, 0x80, 0xFF, ord("c"), ord("r"), ord("x")]
    for at in range(8):
        for value in values:
            damaged = payload[:at] + bytes([value]) + payload[at + 1 :]
            frames = [Frame(9, 5, 0, 0, 1, 1_700_000_000_000_000, damaged, 0)]
            got = _encode(frames, False)
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(envelope, "_ENCODE_CHANGES", None)
                assert got == _encode(frames, False), (at, value)
