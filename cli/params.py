"""Click parameter types shared by the commands."""

from __future__ import annotations

from typing import Any

import click

from moonish.cursor import Cursor
from moonish.errors import InvalidArgumentError


class LsnParam(click.ParamType):  # type: ignore[type-arg]
    """A cursor LSN: a decimal integer in [0, 2**64)."""

    name = "lsn"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return Cursor.parse(str(value)).lsn
        except InvalidArgumentError as error:
            self.fail(error.message, param, ctx)


LSN = LsnParam()
