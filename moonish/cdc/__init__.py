"""The read side: cursors and tokens, decoding frames into change events, Debezium envelopes,
following a log as it grows, merged reads over a data directory, consumers' lag, and the
in-process API (``api``: ``read``, ``tail``, ``ack``).

It reads ``moonish.log`` (the WAL), ``moonish.datadir`` (consumers), ``moonish.state``
(stream configuration, snapshots) and ``moonish.values`` (images); the server, sinks, Spark
and the CLI build on it, and nothing below imports it.
"""
