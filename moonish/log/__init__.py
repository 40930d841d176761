"""One shard's write-ahead log: the byte layout (``format``), record types (``records``) and
their payload encodings (``payloads``), frames and the torn-tail rule (``frames``), segment
files and their index (``segment``), the control file (``control``), crash recovery
(``recovery``), the writer (``writer``: ``WalWriter``), the tail reader (``reader``:
``ShardReader``), closed time (``heartbeat``), and the operator's ``verify`` and ``repair``.

It imports only the base modules (``moonish.errors``, ``clock``, ``fileio``); docs/wal-format.md
is its byte-level reference, docs/architecture.md places it in the pipeline.
"""
