"""``spark.readStream.format("moonish").option("url", "http://host:8470")``: the data source
over a ``moonish serve`` server, so that executors need only the network, not the WAL.

The rows are the directory source's (``CHANGE_COLUMNS``, moonish.spark.datasource), built as
Arrow record batches from the envelopes the server sends (moonish.remote's client; the flat
columns as ``moonish.spark.files.flatten`` derives them from envelope files).

**Offsets are the server's tokens**: ``{"token": "m4.d1201.c877..."}``, per shard the last LSN
delivered (docs/reading.md, "Tokens"). A micro-batch from ``start`` to ``end`` holds, per
shard ``k``, the LSNs ``start[k] + 1 .. end[k]`` (inclusive), one Spark partition per shard
with new changes (split into ranges of ``recordsPerPartition``). A task reads its range with
``GET /v1/changes`` from the token whose component ``k`` is the range's start and whose other
components are the micro-batch's end: the merged stream is in commit-time order, so the other
shards' changes after that end (committed later) come after the range's and are seldom read;
those that are are dropped. The same offsets read the same rows as long as the server's WAL
keeps them, so a replayed micro-batch is the same batch: exactly once with the Delta sink.

Options (names are case-insensitive, as Spark's are):

- ``url``: the server's base URL (``http[s]://host:port[/prefix]``); no ``load(path)`` then.
- ``tokenFile``: a file whose first line is the server's bearer token; read on the driver,
  and handed to the tasks with the plan (executors need no copy of it).
- ``caFile``: PEM certificates to trust for ``https`` (a self-signed server); read on the
  driver and handed to the tasks as text likewise.
- ``maxRecordsPerTrigger``, ``recordsPerPartition``, ``messages``: as for a directory
  (``messages`` keeps the ``op: "m"`` rows a server started with ``--messages`` sends).
- ``startingOffsets``: ``earliest`` (default: every shard from LSN 1; if retention removed it,
  the query fails with ``PositionNotRetainedError`` instead of skipping), ``latest``, or a
  token.
- ``consumer``: the query as a named consumer of the server's data directory: created at the
  starting token if it does not exist (a ``lost`` one fails the query with
  ``ConsumerLostError``), and acknowledged (``POST /v1/consumers/<name>/ack``) with each
  committed micro-batch's end token.

Errors are the remote client's (moonish.remote.errors): a server that cannot be reached is
``RemoteUnavailableError`` (an ``UnavailableError``), a refused bearer token
``RemoteUnauthorizedError`` (an ``InvalidArgumentError``).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from moonish.cdc.envelope import CHECKPOINT_PREFIX
from moonish.cdc.shard_read import MAX_LIMIT
from moonish.cdc.token import Token
from moonish.errors import ConsumerNotFoundError, InvalidArgumentError, UnavailableError
from moonish.remote.options import ClientOptions, base_url, read_token_file
from moonish.spark.columns import ARROW_SCHEMA

if TYPE_CHECKING:
    from moonish.remote.client import Client

DEFAULT_RECORDS_PER_PARTITION = 500_000
OFFSET_KEY = "token"

Offsets = dict[str, str]
"""``{"token": "<token text>"}``: a Spark offset of this source."""


def token_of(offsets: Offsets) -> Token:
    """The token of an offset.

    Raises:
        InvalidArgumentError: not ``{"token": "<token>"}`` (a checkpoint of a directory
            source, whose offsets are ``{"<shard>": <next LSN>}``, read by a URL source).
    """
    text = offsets.get(OFFSET_KEY) if isinstance(offsets, dict) else None
    if not isinstance(text, str):
        raise InvalidArgumentError(
            f"not an offset of the moonish URL source ({{'token': ...}}): {offsets!r}; a "
            "checkpoint written by a directory source cannot be continued from a server"
        )
    return Token.parse(text)


def offsets_of(token: Token) -> Offsets:
    return {OFFSET_KEY: str(token)}


class TokenRange(InputPartition):
    """One task's work: shard ``shard``'s changes after the token ``since`` up to LSN
    ``last`` (inclusive)."""

    def __init__(self, shard: int, since: str, last: int) -> None:
        self.shard, self.since, self.last = shard, since, last


class UrlOptions:
    """The URL source's options (module docstring), as plain values that travel to the
    executors with the reader (the token and CA text, not their files).

    Raises:
        InvalidArgumentError: a bad URL, a path as well as a URL, a number below 1, a token
            or CA file that does not read.
    """

    def __init__(self, options: Any) -> None:
        if options.get("path"):
            raise InvalidArgumentError(
                "the moonish source reads a directory (load(path)) or a server (url), not both"
            )
        self.url = base_url(str(options.get("url")))
        token_file, ca_file = options.get("tokenFile"), options.get("caFile")
        self.token = None if not token_file else read_token_file(token_file)
        self.cadata = None if not ca_file else _read_text(ca_file)
        self.max_records = int(options.get("maxRecordsPerTrigger", 0)) or None
        self.per_partition = int(options.get("recordsPerPartition", DEFAULT_RECORDS_PER_PARTITION))
        self.starting = options.get("startingOffsets", "earliest")
        self.consumer = options.get("consumer") or None
        text = str(options.get("messages", "false")).lower()
        if text not in ("true", "false"):
            raise InvalidArgumentError(f"option messages is true or false, got {text!r}")
        self.messages = text == "true"
        if self.per_partition < 1 or (self.max_records is not None and self.max_records < 1):
            raise InvalidArgumentError("maxRecordsPerTrigger and recordsPerPartition must be >= 1")

    def client(self) -> Client:
        """A new client of the server (close it)."""
        from moonish.remote.client import Client

        return Client(self.url, self.token, ClientOptions(cadata=self.cadata))


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="ascii") as file:
            return file.read()
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidArgumentError(f"cannot read the CA file: {error}", path=path) from None


class _Reading:
    """What the batch and stream readers share: the options and, on the driver, one client
    (left out when Spark pickles the reader for its tasks)."""

    def __init__(self, options: Any) -> None:
        self.options = UrlOptions(options)
        self._client: Client | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None}

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = self.options.client()
        return self._client

    def now(self) -> Token:
        """The server's current end (``GET /v1/info``'s ``now``)."""
        return Token.parse(str(self.client.info()["now"]))

    def start(self) -> Token:
        starting = self.options.starting
        if starting == "earliest":
            return Token.start(len(self.now().positions))
        if starting == "latest":
            return self.now()
        return Token.parse(starting, len(self.now().positions))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, TokenRange)
        return read_range(self.options, partition)


def ranges(start: Token, end: Token, per_partition: int) -> list[TokenRange]:
    """The tasks of the micro-batch ``start`` → ``end``: per shard with new LSNs, ranges of
    at most ``per_partition`` LSNs (module docstring)."""
    found = []
    for shard, (first, last) in enumerate(zip(start.positions, end.positions, strict=True)):
        for low in range(first + 1, last + 1, per_partition):
            since = list(end.positions)
            since[shard] = low - 1
            high = min(last, low + per_partition - 1)
            found.append(TokenRange(shard, str(Token(tuple(since))), high))
    return found


def read_range(options: UrlOptions, part: TokenRange) -> Iterator[pa.RecordBatch]:
    """The rows of one range as Arrow record batches of up to 10,000 changes (one server
    page each), LSN order.

    Raises:
        PositionNotRetainedError: the range's start was removed by retention.
        UnavailableError: the server cannot be reached (RemoteUnavailableError), or its log
            ends before the range does (the data directory was replaced).
        RemoteUnauthorizedError: the bearer token is refused.
    """
    with options.client() as client:
        token = Token.parse(part.since)
        while token.positions[part.shard] < part.last:
            page = client.read(token, limit=MAX_LIMIT)
            if not page.events and page.token == token:
                raise UnavailableError(
                    f"{client.url}: shard {part.shard}'s log ends at LSN "
                    f"{token.positions[part.shard]}, before the planned end {part.last}: the "
                    "server's data directory was replaced or truncated",
                    lsn=token.positions[part.shard],
                )
            batch = envelope_batch(page.events.envelopes, part.shard, part.last, options.messages)
            if batch.num_rows:
                yield batch
            token = page.token


def _key(image: Any) -> bytes | None:
    key = image.get("key") if isinstance(image, dict) else None
    if isinstance(key, dict):
        return base64.b64decode(key["_b64"])
    return None if key is None else str(key).encode()


def _text(image: Any) -> str | None:
    return None if image is None else orjson.dumps(image).decode()


def envelope_batch(
    envelopes: Sequence[bytes], shard: int, last: int, messages: bool = False
) -> pa.RecordBatch:
    """The flat change rows (``ARROW_SCHEMA``) of the envelopes of shard ``shard`` up to LSN
    ``last`` among ``envelopes`` (others are dropped); ``op: "m"`` rows only with
    ``messages``. The columns are those ``moonish.spark.files.flatten`` derives."""
    columns: list[list[Any]] = [[] for _ in ARROW_SCHEMA.names]
    (shards, lsns, ops, times, types, commands, dbs, keys, expired, txns, befores, afters) = columns
    for raw in envelopes:
        envelope = orjson.loads(raw)
        source = envelope["source"]
        op = envelope["op"]
        if source["shard"] != shard or source["lsn"] > last or (op == "m" and not messages):
            continue
        before, after = envelope.get("before"), envelope.get("after")
        image = after if after is not None else before
        image = image if isinstance(image, dict) else {}
        if op == "m":
            prefix = (envelope.get("message") or {}).get("prefix")
            record_type = "checkpoint" if prefix == CHECKPOINT_PREFIX else "message"
        else:
            record_type = image.get("record_type") or "kv_change"
        db = image.get("db")
        shards.append(shard)
        lsns.append(source["lsn"])
        ops.append(op)
        times.append(source["ts_us"])
        types.append(record_type)
        commands.append(source.get("command") or image.get("command"))
        dbs.append(db if isinstance(db, int) else source.get("db"))
        keys.append(_key(image))
        expired.append(bool(source.get("expired")))
        txns.append((envelope.get("transaction") or {}).get("id"))
        befores.append(_text(before))
        afters.append(_text(after))
    arrays = [
        pa.array(column, field.type) for column, field in zip(columns, ARROW_SCHEMA, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


class UrlBatchReader(_Reading, DataSourceReader):
    """A batch read: every shard from ``startingOffsets`` to the server's end as planned."""

    def partitions(self) -> Sequence[InputPartition]:
        try:
            return ranges(self.start(), self.now(), self.options.per_partition)
        finally:
            self.client.close()
            self._client = None


class UrlStreamReader(_Reading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A streaming read of a server (module docstring)."""

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self._target: Token | None = None  # set by availableNow: read no further
        if self.options.consumer is not None:  # pins the log from before the first batch
            register_consumer(self.client, self.options.consumer, self.start())

    def initialOffset(self) -> Offsets:
        return offsets_of(self.start())

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_records is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_records)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.now()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        from moonish.spark.datasource import share

        first = token_of(start).positions
        latest = (self._target or self.now()).positions
        end = tuple(max(a, b) for a, b in zip(first, latest, strict=True))
        if isinstance(limit, ReadMaxRows):
            cut = share(
                {str(k): lsn + 1 for k, lsn in enumerate(first)},
                {str(k): lsn + 1 for k, lsn in enumerate(end)},
                limit.max_rows,
            )
            end = tuple(cut[str(k)] - 1 for k in range(len(end)))
        return offsets_of(Token(end))

    def reportLatestOffset(self) -> Offsets:
        return offsets_of(self.now())

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        return ranges(token_of(start), token_of(end), self.options.per_partition)

    def commit(self, end: Offsets) -> None:
        """Acknowledge ``end`` for the ``consumer`` option's named consumer (as the directory
        source does, moonish.spark.datasource).

        Raises:
            ConsumerLostError: the consumer was marked ``lost``.
        """
        if self.options.consumer is not None:
            self.client.ack(self.options.consumer, token_of(end))

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def register_consumer(client: Client, name: str, start: Token) -> None:
    """Create the named consumer ``name`` at ``start`` unless it exists (a query resumes from
    its checkpoint and acknowledges as it commits); an existing one is read once, so that a
    ``lost`` one fails now.

    Raises:
        ConsumerLostError: it exists and is ``lost``.
        InvalidArgumentError: a bad name.
    """
    try:
        client.read(consumer=name, limit=1)
    except ConsumerNotFoundError:
        client.create_consumer(name, start, owner="spark")
