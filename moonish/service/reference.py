"""The pipeline file's reference (docs/operations.md) as Markdown, made from the schema: a
table per section and command with every key, its type, its default and its help text.
``python -m tests.support.reference`` writes it into docs/operations.md; a test checks that
the page holds it as made from the code."""

from __future__ import annotations

from collections.abc import Sequence

from .argv import shown_line
from .schema import (
    METRICS,
    METRICS_SETTINGS,
    NOT_YET,
    SUPERVISOR,
    SUPERVISOR_SETTINGS,
    TOP,
    OptionSpec,
    SectionSpec,
)

BEGIN = "<!-- the reference, made from the code: python -m tests.support.reference -->"
END = "<!-- end of the reference -->"

_TYPES = {"bool": "boolean", "int": "integer", "float": "number", "str": "string", "path": "path"}


def reference(sections: Sequence[SectionSpec]) -> str:
    """The reference of a file with ``sections``, from :data:`BEGIN` to :data:`END`."""
    out = [
        BEGIN,
        "",
        f"`{TOP}` (top level, a path, required): the data directory every part works on.",
        "",
    ]
    for section in sections:
        for selector, command in section.commands.items():
            name = shown_line(list(command.words))
            chosen = f" with `{selector}`" if selector else ""
            runs = (
                "runs once, then the other parts start"
                if command.once
                else ("runs until the pipeline stops")
            )
            fixed = f"; always with `{' '.join(command.fixed)}`" if command.fixed else ""
            out += [
                f"### `[{section.name}]`{chosen}: `{name}`",
                "",
                f"{section.summary[:1].upper()}{section.summary[1:]}: `{name}` ({runs}{fixed}).",
                "",
                "| key | type | default | what |",
                "|---|---|---|---|",
            ]
            out += [_row(option) for option in command.options if not option.top]
            out.append("")
    out += [f"### `[{SUPERVISOR}]`", "", "| key | type | default | what |", "|---|---|---|---|"]
    out += [
        f"| `{setting.key}` | integer (≥ {setting.minimum}) | {setting.default} | "
        f"{_cell(setting.help)} |"
        for setting in SUPERVISOR_SETTINGS
    ]
    out += ["", f"### `[{METRICS}]`", "", "| key | type | default | what |", "|---|---|---|---|"]
    for metric in METRICS_SETTINGS:
        kind = _TYPES[metric.kind]
        if metric.minimum is not None:
            kind += (
                f" ({metric.minimum}..{metric.maximum})"
                if metric.maximum is not None
                else f" (≥ {metric.minimum})"
            )
        default = "required" if metric.default is None else f"`{metric.default}`"
        out.append(f"| `{metric.key}` | {kind} | {default} | {_cell(metric.help)} |")
    if NOT_YET:
        out += [
            "",
            "Reserved for later, refused by name today: "
            + "; ".join(f"`[{name}]` ({why})" for name, why in NOT_YET.items())
            + ".",
        ]
    out += ["", END]
    return "\n".join(out) + "\n"


def _row(option: OptionSpec) -> str:
    kind = _TYPES[option.kind]
    if option.multiple:
        kind = f"list of {kind}s"
    if option.choices:
        kind += ": " + ", ".join(f"`{choice}`" for choice in option.choices)
    what = _cell(option.help)
    if option.flag is None:
        default = "required"
    else:
        default = (
            "required"
            if option.required
            else ("" if option.default is None else f"`{option.default}`")
        )
    return f"| `{option.key}` | {kind} | {default} | {what} |"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|").replace("<", "\\<")
