"""The C encoder of kv_change frames (moonish/log/_cframes.c) against the Python one
(moonish.log.frames.encode_records_py): the same bytes for any batch, the same errors, and a
fall back to Python for what it does not take. A pure build (``MOONISH_PURE=1``, docs/build.md)
has no C extension: the module is skipped there, by name (test_extensions checks that a
compiled build has it)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moonish.extensions import is_compiled
from moonish.log import frames
from moonish.log.frames import encode_records, encode_records_py, scan_frames
from moonish.log.payloads import decode_payload
from moonish.log.records import _ROW_FLAGS, Checkpoint, KvChange, Replay, ViewType

pytestmark = pytest.mark.skipif(not is_compiled(frames), reason="a pure build has no C extension")
_cframes = frames._cframes
_blobs = st.binary(max_size=40)


def _valid(change: KvChange) -> KvChange:
    """``change`` as the decoder accepts it: a state only to replay, argv only (and always) to
    run, a row only with op ``r``."""
    return change._replace(
        state=change.state if change.replay == Replay.STATE else b"",
        argv=(change.argv or (b"SET",)) if change.replay == Replay.COMMAND else (),
        row=change.row if change.op == "r" else "",
    )


changes = st.builds(
    KvChange,
    op=st.sampled_from("cudr"),
    db=st.integers(0, 65535),
    command=_blobs,
    key=_blobs,
    before=st.binary(max_size=300),
    after=st.binary(max_size=300),
    view=st.sampled_from(list(ViewType)),
    expired=st.booleans(),
    replay=st.sampled_from(list(Replay)),
    state=_blobs,
    argv=st.lists(_blobs, max_size=6).map(tuple),
    loading=st.booleans(),
    source=st.binary(max_size=30),
    row=st.sampled_from(sorted(_ROW_FLAGS)),
).map(_valid)


@settings(max_examples=400, deadline=None)
@given(
    records=st.lists(changes, min_size=1, max_size=5),
    first_lsn=st.integers(1, 2**63 - 1),
    commit_us=st.integers(0, 2**62),
    flags=st.sampled_from([0, 1]),
    source=st.none() | st.binary(max_size=30),
)
@pytest.mark.slow
def test_the_c_encoder_writes_the_bytes_of_the_python_one(
    records: list[KvChange], first_lsn: int, commit_us: int, flags: int, source: bytes | None
) -> None:
    flags = 1 if len(records) > 1 else flags  # FLAG_BATCH: a batch of several needs it
    data = _cframes.encode_changes(records, first_lsn, commit_us, flags, source)
    assert data == encode_records_py(records, first_lsn, commit_us, flags, source)
    assert encode_records(records, first_lsn, commit_us, flags, source) == data
    frames, end, stop = scan_frames(data, 0, first_lsn, len(records) + 1)
    assert stop is None and end == len(data)
    decoded = [decode_payload(frame.record_type, frame.payload) for frame in frames]
    if source is not None:  # stored on the last record instead of its own
        records = [*records[:-1], records[-1]._replace(source=source)]
    assert decoded == records
    assert [(f.lsn, f.batch_index, f.batch_size, f.commit_us, f.flags) for f in frames] == [
        (first_lsn + i, i, len(records), commit_us, flags) for i in range(len(records))
    ]


def test_other_records_and_field_types_fall_back_to_python() -> None:
    change = KvChange("c", 0, b"SET", b"k", b"", b'{"v":1}', ViewType.NEW_AND_OLD_IMAGES)
    mixed = [change, Checkpoint(1, "label")]
    assert _cframes.encode_changes(mixed, 1, 5, 1, None) is None
    assert encode_records(mixed, 1, 5, 1) == encode_records_py(mixed, 1, 5, 1)
    for odd in (change._replace(expired=1), change._replace(argv=[b"SET", b"k", b"v"])):
        assert _cframes.encode_changes([odd], 1, 5, 0, None) is None  # to Python, which...
        with pytest.raises(TypeError):  # ...refuses them compiled (docs/build.md)
            encode_records([odd], 1, 5, 0)
    unusual = change._replace(key=bytearray(b"k"))  # left to Python, which refuses it
    assert _cframes.encode_changes([unusual], 1, 5, 0, None) is None
    with pytest.raises(TypeError):
        encode_records([unusual], 1, 5, 0)


@pytest.mark.parametrize(
    "bad, error",
    [
        ({"db": 65536}, ValueError),
        ({"db": -1}, ValueError),
        ({"db": 2**70}, ValueError),
        ({"row": "middle"}, KeyError),
    ],
)
def test_the_c_encoder_refuses_what_the_python_one_refuses(
    bad: dict[str, object], error: type[Exception]
) -> None:
    record = KvChange("u", 0, b"SET", b"k", b"", b"", ViewType.KEYS_ONLY)._replace(**bad)
    with pytest.raises(error):
        encode_records_py([record], 1, 1, 0)
    with pytest.raises(error):
        _cframes.encode_changes([record], 1, 1, 0, None)


@settings(max_examples=100, deadline=None)
@given(change=changes)
def test_the_c_constructor_makes_the_record_of_its_fields(change: KvChange) -> None:
    made = _cframes.kv_change(*change)
    assert type(made) is KvChange and made == change and made == frames.kv_change_py(*change)
    assert made.after is change.after and made.argv is change.argv  # the objects, as given


def test_the_c_encoder_refuses_flags_beyond_a_byte() -> None:
    record = KvChange("u", 0, b"SET", b"k", b"", b"", ViewType.KEYS_ONLY)
    with pytest.raises(ValueError, match="flags"):
        _cframes.encode_changes([record], 1, 1, 256, None)
