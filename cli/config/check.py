"""``moonish config check``: a pipeline file checked and shown as ``moonish run`` reads it."""

from __future__ import annotations

import click
import orjson

from ..pipeline import sections


@click.command("check")
@click.argument("pipeline_file", type=click.Path(dir_okay=False))
def check(pipeline_file: str) -> None:
    """Check PIPELINE_FILE (moonish run's TOML file) and print it resolved: every key as it
    will be used (paths absolute, ${ENV_VAR}s replaced), the defaults commented out, and
    above each part the command line it runs. Secrets are masked (a URL's password, keys and
    librdkafka settings named for a password, secret, token or key, values from variables
    named so).

    An error names the file, the line and the key (exit 2): a key that is not an option of
    the part's command, a value of the wrong type or one the command refuses (a range, a
    choice, a missing file), an unset variable, a missing key the command needs.
    docs/operations.md is the reference of the file.

    Example:

        moonish config check pipeline.toml
    """
    from moonish.service.config import load_pipeline
    from moonish.service.schema import (
        METRICS,
        METRICS_SETTINGS,
        SUPERVISOR,
        SUPERVISOR_SETTINGS,
        TOP,
    )

    specs = sections()
    pipeline = load_pipeline(pipeline_file, specs)
    out = [f"# {pipeline.path}: valid", f"{TOP} = {_toml(pipeline.data_dir)}"]
    for part in pipeline.parts:
        runs = "runs once, then the other parts start" if part.once else "runs until stopped"
        out += ["", f"[{part.name}]", f"# {part.shown}", f"# ({runs})"]
        for option in part.command.options:
            if option.top:
                continue
            if option.key in part.masked:
                out.append(f"{option.key} = {_toml(part.masked[option.key])}")
            elif option.default is not None:
                out.append(f"# {option.key} = {_toml(option.default)}  (the default)")
    out += ["", f"[{SUPERVISOR}]"]
    for setting in SUPERVISOR_SETTINGS:
        value = pipeline.settings[setting.key]
        note = "  (the default)" if value == setting.default else ""
        out.append(f"{'# ' if note else ''}{setting.key} = {value}{note}")
    if pipeline.metrics is not None:
        out += ["", f"[{METRICS}]"]
        for metric in METRICS_SETTINGS:
            given = pipeline.metrics[metric.key]
            note = "  (the default)" if given == metric.default else ""
            out.append(f"{'# ' if note else ''}{metric.key} = {_toml(given)}{note}")
    click.echo("\n".join(out))


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    if isinstance(value, str):
        return orjson.dumps(value).decode()
    return str(value)
