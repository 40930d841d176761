"""``--max-value-bytes`` help describes what envelopes carry for a value left out of an image
(``"value": null, "omitted_length": n``, docs/envelopes.md), not the stored marker."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from cli.main import moonish


@pytest.mark.parametrize("command", ["import-aof", "import-rdb", "capture", "stream"])
def test_max_value_bytes_help_shows_the_envelopes_form(command: str) -> None:
    shown = CliRunner().invoke(moonish, ["wal", command, "--help"], terminal_width=1000)
    assert shown.exit_code == 0, shown.output
    assert '"value": null, "omitted_length": n' in " ".join(shown.output.split())
    assert "_omitted_length" not in shown.output
