"""Golden fixtures, byte for byte: fixtures/wal/<scenario>/ read with a fixed clock must give
fixtures/golden/<scenario>.ndjson, and rebuilding a scenario must give the same WAL bytes.
Regenerate both only with `make golden` (see tests/support/golden.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.golden import FIXTURES, FROZEN_V1, SCENARIOS, build, read_golden


@pytest.mark.parametrize("scenario", sorted([*SCENARIOS, *FROZEN_V1]))
def test_reading_the_fixture_gives_the_golden_output(scenario: str) -> None:
    expected = (FIXTURES / "golden" / f"{scenario}.ndjson").read_bytes()
    assert read_golden(FIXTURES / "wal" / scenario) == expected


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_writing_the_scenario_again_gives_the_same_bytes(scenario: str, tmp_path: Path) -> None:
    build(scenario, tmp_path / scenario)
    fixture = FIXTURES / "wal" / scenario
    names = sorted(p.name for p in fixture.iterdir())
    assert sorted(p.name for p in (tmp_path / scenario).iterdir()) == names
    for name in names:
        assert (tmp_path / scenario / name).read_bytes() == (fixture / name).read_bytes(), name


def test_every_scenario_has_a_fixture_and_a_golden_file() -> None:
    names = sorted([*SCENARIOS, *FROZEN_V1])
    assert sorted(p.name for p in (FIXTURES / "wal").iterdir()) == names
    assert sorted(p.stem for p in (FIXTURES / "golden").iterdir()) == names


@pytest.mark.parametrize("scenario", FROZEN_V1)
def test_frozen_fixtures_are_format_version_1(scenario: str) -> None:
    for segment in (FIXTURES / "wal" / scenario).glob("*.seg"):
        assert segment.read_bytes()[8:10] == b"\x01\x00", segment
