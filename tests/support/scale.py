"""How hard the adversarial and property tests push: ``MOONISH_TEST_SCALE`` (default 1) scales
their rounds, trials and examples. ``make test`` runs them at 1; ``make check``, the fast loop,
at a third; ``make stress`` sets the crash and damage rounds to thousands itself."""

from __future__ import annotations

import os

SCALE = float(os.environ.get("MOONISH_TEST_SCALE", "1"))


def scaled(count: int) -> int:
    """``count`` times :data:`SCALE`, at least 1."""
    return max(1, round(count * SCALE))
