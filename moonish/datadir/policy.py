"""A shard's retention policy: what it keeps, as a value (stored in ``stream.json`` by
moonish.state.config; moonish.datadir.retention applies it)."""

from __future__ import annotations

from dataclasses import dataclass

from moonish.errors import InvalidArgumentError

RULES = ("max_bytes", "max_age_ms", "max_records")
"""The rules that delete; ``before`` is the reason of an explicit ``wal prune --before``."""


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """What a shard keeps; every field is optional (``None``: no such rule), so the default
    policy keeps everything.

    Attributes:
        max_bytes: delete the oldest sealed segments while the shard's segments total more.
        max_age_ms: delete sealed segments whose newest record's commit time is older.
        max_records: delete the oldest sealed segments while the shard holds more LSNs
            (from the oldest segment's first LSN to the end of the log).
        min_age_ms: never delete a segment whose newest record is younger than this.
        max_pinned_bytes: the most that consumers may hold beyond what the other rules keep;
            past it the laggiest consumer is marked ``lost``.
    """

    max_bytes: int | None = None
    max_age_ms: int | None = None
    max_records: int | None = None
    min_age_ms: int | None = None
    max_pinned_bytes: int | None = None

    def __post_init__(self) -> None:
        for name, value in self.to_json().items():
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 0
            ):
                raise InvalidArgumentError(
                    f"retention {name} must be an integer >= 0, got {value!r}"
                )

    @property
    def deletes(self) -> bool:
        """Whether any rule deletes (otherwise the policy keeps everything)."""
        return any(getattr(self, rule) is not None for rule in RULES)

    def to_json(self) -> dict[str, int | None]:
        return {
            "max_bytes": self.max_bytes,
            "max_age_ms": self.max_age_ms,
            "max_records": self.max_records,
            "min_age_ms": self.min_age_ms,
            "max_pinned_bytes": self.max_pinned_bytes,
        }

    @classmethod
    def from_json(cls, document: object) -> RetentionPolicy:
        """The policy :meth:`to_json` wrote (keys left out are ``None``).

        Raises:
            InvalidArgumentError: not an object of those keys with integers >= 0 or null.
        """
        if not isinstance(document, dict) or not set(document) <= set(cls().to_json()):
            raise InvalidArgumentError(f"not a retention policy: {document!r}")
        return cls(**document)
