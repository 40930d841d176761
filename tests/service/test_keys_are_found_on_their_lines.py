"""tomllib gives no positions: a key's line is found in the text (tables, quoted and dotted
keys, multi-line strings skipped), and a key it cannot place (in an inline table) is placed at
its table's line."""

from __future__ import annotations

from moonish.service.document import key_lines

TEXT = '''\
# a pipeline
data_dir = "data"

[ source ]   # spaces in the header
"url" = "redis://h"
shards = 4
view = """
port = 1
"""

[kafka]
client_config = [
  "a=b",
]
serve.port = 7
spark = { table_dir = "t" }
'''


def test_each_key_is_found_on_its_line() -> None:
    lines = key_lines(TEXT)
    assert lines["data_dir"] == 2
    assert lines["source"] == 4
    assert lines["source.url"] == 5
    assert lines["source.shards"] == 6
    assert lines["source.view"] == 7
    assert "source.port" not in lines  # inside the multi-line string
    assert lines["kafka"] == 11
    assert lines["kafka.client_config"] == 12
    assert lines["kafka.serve.port"] == 15
    assert lines["kafka.spark"] == 16
