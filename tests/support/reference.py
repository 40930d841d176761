"""``python -m tests.support.reference``: write the pipeline file's reference, made from the
code (moonish.service.reference), into docs/operations.md between its markers."""

from __future__ import annotations

from cli.pipeline import sections
from moonish.service.reference import BEGIN, END, reference
from tests.support.paths import ROOT

PAGE = ROOT / "docs" / "operations.md"


def current_page() -> tuple[str, str]:
    """docs/operations.md as it is, and as it is with the reference made now."""
    text = PAGE.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END) + 1
    return text, text[:start] + reference(sections()) + text[end:]


if __name__ == "__main__":
    _, made = current_page()
    PAGE.write_text(made)
