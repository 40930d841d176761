"""``promtool check metrics`` (Debian's ``prometheus`` package; `make install` installs it)."""

from __future__ import annotations

import shutil
import subprocess
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def promtool_check(text: str) -> None:
    """Assert that ``promtool check metrics`` accepts ``text`` (no lint problem either)."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: `make install` installs it (Debian's prometheus)"
    done = subprocess.run(
        [promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=60
    )
    problems = (done.stdout + done.stderr).decode()
    assert done.returncode == 0 and not problems.strip(), problems


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return 0, ""


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition: (name, sorted labels) -> value."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def total(
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(
        value
        for (sample, pairs), value in found.items()
        if sample == name and all(dict(pairs).get(k) == v for k, v in labels.items())
    )
