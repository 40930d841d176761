"""docs/operations.md's reference of the pipeline file is the one made from the commands'
options: a new option is a new key there, or this test fails
(``python -m tests.support.reference`` rewrites it)."""

from __future__ import annotations

from tests.support.reference import current_page


def test_docs_operations_holds_the_reference_made_from_the_code() -> None:
    page, made = current_page()
    assert page == made, "docs/operations.md is stale: python -m tests.support.reference"
