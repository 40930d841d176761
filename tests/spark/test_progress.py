"""Progress and stops of ``spark materialize --follow`` (moonish.spark.progress), without Spark: a
progress line names the batch, rows, duration and LSNs; a stop waits for the running micro-batch
and lets none start."""

from __future__ import annotations

import pytest

from moonish.spark.progress import BatchGate, BatchStopped, progress_fields, progress_line


def test_progress_lines_name_the_batch_rows_duration_and_lsns() -> None:
    progress = {
        "batchId": 3,
        "numInputRows": 900,
        "batchDuration": 812,
        "sources": [{"startOffset": '{"0": 101, "1": 7}', "endOffset": '{"0": 601, "1": 7}'}],
    }
    assert progress_line(progress) == "batch 3: 900 rows in 812 ms; shard 0: LSN 101..600"
    files = {**progress, "sources": [{"startOffset": None, "endOffset": '{"logOffset":0}'}]}
    assert progress_line(files).endswith('; offsets None -> {"logOffset":0}')


def test_a_server_sources_token_offsets_are_lsn_ranges() -> None:
    """The URL source's offsets are the server's tokens (last LSN delivered per shard)."""
    source = {"startOffset": '{"token": "m2.c100.a7"}', "endOffset": '{"token": "m2.c600.a7"}'}
    progress = {"batchId": 3, "numInputRows": 500, "batchDuration": 812, "sources": [source]}
    assert progress_line(progress) == "batch 3: 500 rows in 812 ms; shard 0: LSN 101..600"
    assert progress_fields(progress)["lsn_ranges"] == {"0": [101, 600]}
    first = {**progress, "sources": [{"startOffset": None, "endOffset": source["endOffset"]}]}
    assert progress_line(first).endswith("shard 0: LSN 1..600, shard 1: LSN 1..7")


def test_progress_fields_are_the_line_as_values() -> None:
    source = {"startOffset": '{"0": 101, "1": 9}', "endOffset": '{"0": 601, "1": 9}'}
    progress = {"batchId": 3, "numInputRows": 900, "batchDuration": 812, "sources": [source]}
    assert progress_fields(progress) == {
        "batch_id": 3,
        "rows": 900,
        "duration_ms": 812,
        "lsn_ranges": {"0": [101, 600]},
    }
    files = {"batchId": 0, "sources": [{"startOffset": None, "endOffset": '{"logOffset":0}'}]}
    assert progress_fields(files)["offsets"] == [{"start": None, "end": {"logOffset": 0}}]


def test_a_stop_waits_for_the_running_batch_and_lets_none_start() -> None:
    gate = BatchGate()
    with gate.batch(0):
        assert not gate.close(0.05)  # the batch runs: the stop waits
    assert gate.close(0.05)
    with pytest.raises(BatchStopped, match="micro-batch 1 not started"), gate.batch(1):
        pass


def test_a_batch_cut_short_by_a_stop_fails_with_a_short_message() -> None:
    gate = BatchGate()
    with pytest.raises(BatchStopped) as stopped, gate.batch(0):
        assert not gate.close(0)  # a forced stop: its jobs are cancelled
        raise RuntimeError("py4j.protocol.Py4JJavaError: ... job cancelled\n" * 1000)
    assert str(stopped.value) == "micro-batch 0 cut short: stopped"
    assert stopped.value.__suppress_context__  # the long traceback stays out of the message
    gate = BatchGate()
    with pytest.raises(RuntimeError, match="real failure"), gate.batch(0):
        raise RuntimeError("a real failure")
