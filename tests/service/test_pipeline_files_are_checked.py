"""A pipeline file is checked against the commands its parts run: keys are their options
(underscores for dashes), values their types and ranges, every error names the file, the line
and the key (exit 2), ``${ENV_VAR}`` comes from the environment, secrets are never shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.main import main
from cli.pipeline import sections
from moonish.errors import InvalidArgumentError
from moonish.service.config import Pipeline, load_pipeline
from moonish.service.errors import ConfigError

ISSUE_EXAMPLE = """\
data_dir = "data"

[source]
url = "redis://capture:${REDIS_PASSWORD}@127.0.0.1:6379"
shards = 4

[kafka]
bootstrap_servers = "127.0.0.1:9092"
topic_prefix = "app"
client_config = ["security.protocol=SASL_SSL", "sasl.password=${KAFKA_PASSWORD}"]

[serve]
port = 8470
"""

ENV = {"REDIS_PASSWORD": "redis-secret", "KAFKA_PASSWORD": "kafka-secret"}


def load(tmp_path: Path, text: str, environ: dict[str, str] | None = None) -> Pipeline:
    path = tmp_path / "pipeline.toml"
    path.write_text(text)
    return load_pipeline(str(path), sections(), ENV if environ is None else environ)


def refused(tmp_path: Path, text: str, environ: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, text, environ)
    assert isinstance(caught.value, InvalidArgumentError)  # exit 2
    return caught.value


def test_the_issues_example_runs_each_part_as_its_command(tmp_path: Path) -> None:
    pipeline = load(tmp_path, ISSUE_EXAMPLE)
    data = str(tmp_path / "data")
    assert pipeline.data_dir == data
    assert [part.name for part in pipeline.parts] == ["source", "kafka", "serve"]
    source, kafka, serve = pipeline.parts
    assert source.argv == (
        "wal",
        "capture",
        "redis://capture:redis-secret@127.0.0.1:6379",
        data,
        "--shards",
        "4",
    )
    assert not source.once
    assert kafka.argv == (
        "cdc",
        "kafka",
        data,
        "--follow",
        "--bootstrap-servers",
        "127.0.0.1:9092",
        "--topic-prefix",
        "app",
        "--client-config",
        "security.protocol=SASL_SSL",
        "--client-config",
        "sasl.password=kafka-secret",
    )
    assert serve.argv == ("serve", data, "--port", "8470")
    assert pipeline.shards == 4
    assert pipeline.settings["stop_timeout_ms"] == 30_000


def test_secrets_are_masked_in_what_is_shown(tmp_path: Path) -> None:
    source, kafka, _ = load(tmp_path, ISSUE_EXAMPLE).parts
    assert "redis-secret" not in source.shown and "capture:***@127.0.0.1" in source.shown
    assert source.masked["url"] == "redis://capture:***@127.0.0.1:6379"
    assert "kafka-secret" not in kafka.shown and "sasl.password=***" in kafka.shown
    assert kafka.masked["client_config"] == ["security.protocol=SASL_SSL", "sasl.password=***"]


def test_a_value_from_a_variable_named_for_a_secret_is_masked(tmp_path: Path) -> None:
    text = 'data_dir = "d"\n[kafka]\nbootstrap_servers = "${BROKER_TOKEN}"\n'
    (kafka,) = load(tmp_path, text, {"BROKER_TOKEN": "tok-123"}).parts
    assert kafka.masked["bootstrap_servers"] == "***" and "tok-123" not in kafka.shown
    assert "tok-123" in kafka.argv


def test_config_check_prints_the_resolved_file_with_secrets_masked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "pipeline.toml"
    path.write_text(ISSUE_EXAMPLE)
    assert main(["config", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "secret" not in out
    data = tmp_path / "data"
    assert f"# moonish wal capture 'redis://capture:***@127.0.0.1:6379' {data} --shards 4" in out
    assert 'url = "redis://capture:***@127.0.0.1:6379"' in out
    assert '# view = "NEW_AND_OLD_IMAGES"  (the default)' in out
    assert "# stop_timeout_ms = 30000  (the default)" in out


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        (
            'data_dir = "d"\n\n[serve]\nport = 80\nhots = "x"\n',
            5,
            "unknown key serve.hots: not an option of moonish serve",
        ),
        (
            'data_dir = "d"\n[source]\naof = "."\nshards = 2\nack_interval_ms = 100\n',
            5,
            "source.ack_interval_ms: not an option of moonish wal import-aof (an option of "
            "moonish wal capture)",
        ),
        ('data_dir = "d"\n[serve]\nport = "80"\n', 3, "serve.port must be an integer, not str"),
        ('data_dir = "d"\n[serve]\nport = 70000\n', 3, "serve.port: 70000 is not in the range"),
        (
            'data_dir = "d"\n[source]\nurl = "redis://h"\nshards = 4\nview = "ALL"\n',
            5,
            "source.view: 'ALL' is not one of",
        ),
        ('data_dir = "d"\n[source]\nrdb = "missing.rdb"\nshards = 4\n', 3, "source.rdb: File"),
        ('data_dir = "d"\n[source]\nurl = "redis://h"\n', 2, "[source] needs shards"),
        (
            'data_dir = "d"\n[source]\nurl = "redis://h"\naof = "."\nshards = 1\n',
            2,
            "[source] takes exactly one of url, aof, rdb (given: url and aof)",
        ),
        (
            'data_dir = "d"\n[kafka]\nbootstrap_servers = "b"\nfollow = false\n',
            4,
            "kafka.follow: always given under moonish run",
        ),
        (
            'data_dir = "d"\n[kafka]\nbootstrap_servers = "b"\nclient_config = "a=b"\n',
            4,
            "kafka.client_config must be a list",
        ),
        (
            'data_dir = "d"\n[kafka]\nbootstrap_servers = "b"\nclient_config = ["ab"]\n',
            4,
            "kafka.client_config: expected NAME=VALUE",
        ),
        (
            'data_dir = "d"\n[serve]\n\n[filter]\nexclude_keys = ["tmp:*"]\n',
            4,
            "[filter] filters the source: add [source]",
        ),
        (
            'data_dir = "d"\n[source]\nurl = "redis://h"\nshards = 1\n[filter]\n'
            'exclude_keys = ["tmp:[*"]\n',
            6,
            "filter.exclude_keys: key pattern 'tmp:[*' has an unclosed [",
        ),
        (
            'data_dir = "d"\n[source]\nurl = "redis://h"\nshards = 1\n[filter]\n'
            'commands = ["FLUSHALL"]\n',
            6,
            "filter.commands: use exclude_commands",
        ),
        (
            'data_dir = "d"\n[source]\nurl = "redis://h"\nshards = 1\n[filter]\nkeys = ["a"]\n',
            6,
            "unknown key 'filter.keys' ([filter] takes include_keys, exclude_keys, dbs, types, "
            "exclude_commands)",
        ),
        (
            'data_dir = "d"\n[source]\nurl = "redis://h"\nshards = 1\ndbs = [0]\n'
            "[filter]\ndbs = [1]\n",
            7,
            "dbs is set in both [source] and [filter]",
        ),
        (
            'data_dir = "d"\n[source]\nurl = "redis://h"\nshards = 1\n[filter]\n'
            'types = ["strings"]\n',
            6,
            "filter.types: 'strings' is not one of",
        ),
        (
            'data_dir = "d"\n[serve]\n[metrics]\nport = 70000\n',
            4,
            "metrics.port must be an integer in 0..65535",
        ),
        ('data_dir = "d"\n[serve]\n[metrics]\nprot = 9464\n', 4, "unknown key metrics.prot"),
        ('data_dir = "d"\n[serve]\n[metrics]\nhost = "::1"\n', 3, "[metrics] needs port"),
        ('data_dir = "d"\n[serve]\n[sources]\n', 3, "unknown key 'sources'"),
        ('data_dir = "d"\nshards = 4\n[serve]\n', 2, "unknown key 'shards'"),
        ("[serve]\nport = 1\n", None, "data_dir must be set"),
        (
            'data_dir = "d"\n[supervisor]\nstop_timeout_ms = -5\n[serve]\n',
            3,
            "supervisor.stop_timeout_ms must be an integer >= 0",
        ),
        (
            'data_dir = "d"\n[supervisor]\nstop_timeout = 5\n[serve]\n',
            3,
            "unknown key supervisor.stop_timeout",
        ),
        ('data_dir = "d"\n', None, "the pipeline has no part"),
        ('data_dir = "d"\n[serve]\nport = 8470\nport = 8471\n', 4, "not valid TOML"),
        (
            'data_dir = "d"\n[serve]\nhost = "${UNSET_VARIABLE}"\n',
            3,
            "serve.host: the environment variable UNSET_VARIABLE is not set",
        ),
        ('data_dir = "d"\n[serve]\nhost = "a${b"\n', 3, "'${' starts no variable"),
    ],
)
def test_an_error_names_the_file_the_line_and_the_key(
    tmp_path: Path, text: str, line: int | None, says: str
) -> None:
    error = refused(tmp_path, text)
    assert says in error.message
    assert error.line == line
    where = f"{tmp_path / 'pipeline.toml'}" + ("" if line is None else f", line {line}")
    assert str(error).endswith(f"({where})")


def test_an_error_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pipeline.toml"
    path.write_text('data_dir = "d"\n[serve]\nport = -1\n')
    assert main(["config", "check", str(path)]) == 2
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0] == err[1]
    assert err[0].startswith("moonish: invalid_argument: serve.port: -1 is not in the range")
    assert err[0].endswith(f"({path}, line 3)")


def test_a_secret_is_not_echoed_by_an_error(tmp_path: Path) -> None:
    text = 'data_dir = "d"\n[kafka]\nbootstrap_servers = "b"\nclient_config = ["${SECRET}"]\n'
    error = refused(tmp_path, text, {"SECRET": "hunter2"})
    assert "hunter2" not in str(error)


def test_variables_are_replaced_in_strings_only_and_dollar_dollar_is_literal(
    tmp_path: Path,
) -> None:
    text = 'data_dir = "${DIR}"\n[serve]\nport = "${PORT}"\nhost = "$${HOST}"\n'
    (serve,) = load(tmp_path, text, {"DIR": "the-data", "PORT": "9000"}).parts
    assert serve.values["port"] == 9000  # a variable is a string: converted for the option
    assert serve.values["host"] == "${HOST}"
    assert serve.argv[1] == str(tmp_path / "the-data")


def test_paths_are_relative_to_the_files_directory(tmp_path: Path) -> None:
    (tmp_path / "dump.rdb").write_bytes(b"")
    (tmp_path / "token").write_text("0123456789abcdef0123\n")
    text = (
        'data_dir = "data"\n[source]\nrdb = "dump.rdb"\nshards = 2\n'
        '[serve]\ntoken_file = "token"\nhost = "0.0.0.0"\n'
    )
    source, serve = load(tmp_path, text).parts
    assert source.once
    assert source.argv[:4] == (
        "wal",
        "import-rdb",
        str(tmp_path / "dump.rdb"),
        str(tmp_path / "data"),
    )
    assert serve.argv[2:] == ("--host", "0.0.0.0", "--token-file", str(tmp_path / "token"))


def test_every_option_of_each_command_is_a_key(tmp_path: Path) -> None:
    """The file and the command line cannot drift: each section takes every option of its
    command but the fixed ones and those moonish run gives every part (--log-format), by the
    option's name."""
    import click

    from cli.pipeline import _FROM_RUN, _PARTS, command

    specs = {section.name: section for section in sections()}
    for name, commands in _PARTS.items():
        for selector, _words, target, _arguments, fixed, _once in commands:
            spec = specs[name].commands[selector]
            keys = {option.key for option in spec.options}
            for param in command(target).params:
                if isinstance(param, click.Option):
                    flag = max(param.opts, key=len)
                    given = flag in fixed or flag in _FROM_RUN
                    assert given != (flag[2:].replace("-", "_") in keys), flag


def test_spark_materializes_the_data_directory_with_follow(tmp_path: Path) -> None:
    text = (
        'data_dir = "data"\n[spark]\ntable_dir = "table"\ncheckpoint = "table-ck"\n'
        'master = "local[2]"\n'
    )
    (spark,) = load(tmp_path, text).parts
    assert spark.argv == (
        "spark",
        "materialize",
        str(tmp_path / "data"),
        str(tmp_path / "table"),
        "--follow",
        "--checkpoint",
        str(tmp_path / "table-ck"),
        "--master",
        "local[2]",
    )
    assert (
        "needs checkpoint"
        in refused(tmp_path, 'data_dir = "d"\n[spark]\ntable_dir = "t"\n').message
    )


def test_a_table_on_object_storage_is_taken_as_it_is(tmp_path: Path) -> None:
    text = (
        'data_dir = "data"\n[spark]\ntable_dir = "s3://lake/redis"\ncheckpoint = "ckpt"\n'
        'storage_option = ["AWS_REGION=eu-west-1"]\n'
    )
    (spark,) = load(tmp_path, text).parts
    assert "s3://lake/redis" in spark.argv and str(tmp_path / "ckpt") in spark.argv


def test_kafka_routes_are_tables_of_match_and_topic(tmp_path: Path) -> None:
    text = (
        'data_dir = "d"\n[kafka]\nbootstrap_servers = "b"\nexclude_keys = ["tmp:*"]\n'
        '[[kafka.route]]\nmatch = "user:*"\ntopic = "app.users"\n'
        '[[kafka.route]]\nmatch = "a=b*"\ntopic = "app.ab"\n'
    )
    (kafka,) = load(tmp_path, text).parts
    argv = list(kafka.argv)
    assert argv[argv.index("--route") + 1] == "user:*=app.users"
    assert "a=b*=app.ab" in argv and argv[argv.index("--exclude-keys") + 1] == "tmp:*"
    bad = text.replace('topic = "app.ab"', 'topics = "app.ab"')
    assert "each [[kafka.route]] takes match" in refused(tmp_path, bad).message


def test_metrics_section_takes_its_defaults_and_a_variable(tmp_path: Path) -> None:
    from cli.pipeline import sections
    from moonish.service.config import load_pipeline

    path = tmp_path / "pipeline.toml"
    path.write_text('data_dir = "d"\n[serve]\n[metrics]\nport = "${METRICS_PORT}"\n')
    pipeline = load_pipeline(str(path), sections(), {"METRICS_PORT": "9464"})
    assert pipeline.metrics == {"port": 9464, "host": "127.0.0.1", "ready_max_lag_ms": 60_000}
    assert not [arg for part in pipeline.parts for arg in part.argv if arg.startswith("--metrics")]
    path.write_text('data_dir = "d"\n[serve]\n')
    assert load_pipeline(str(path), sections()).metrics is None


def test_serve_takes_key_patterns_as_lists(tmp_path: Path) -> None:
    text = 'data_dir = "d"\n[serve]\nexclude_keys = ["tmp:*", "session:*"]\ninclude_keys = ["a*"]\n'
    (serve,) = load(tmp_path, text).parts
    argv = list(serve.argv)
    pairs = [(argv[i], argv[i + 1]) for i in range(len(argv) - 1) if argv[i].endswith("-keys")]
    assert sorted(pairs) == [
        ("--exclude-keys", "session:*"),
        ("--exclude-keys", "tmp:*"),
        ("--include-keys", "a*"),
    ]
    bad = text.replace('"a*"', '"a["')
    why = "serve.include_keys: key pattern 'a[' has an unclosed ["
    assert why in refused(tmp_path, bad).message


def test_the_issues_file_as_written_is_a_pipeline(tmp_path: Path) -> None:
    """The file of issue 28 §1, word for word: the capture leaves the two patterns out, Kafka
    and the server run beside it, the supervisor serves the metrics."""
    text = (
        'data_dir = "data"\n\n[source]\nurl = "redis://127.0.0.1:6379"\nshards = 4\n\n'
        '[filter]\nexclude_keys = ["tmp:*", "session:*"]\n\n'
        '[kafka]\nbootstrap_servers = "127.0.0.1:9092"\ntopic_prefix = "app"\n\n'
        "[serve]\nport = 8470\n\n[metrics]\nport = 9464\n"
    )
    pipeline = load(tmp_path, text)
    source, kafka, serve = pipeline.parts
    assert source.argv[-4:] == ("--exclude-keys", "tmp:*", "--exclude-keys", "session:*")
    assert kafka.argv[:2] == ("cdc", "kafka") and serve.argv[-2:] == ("--port", "8470")
    assert pipeline.metrics is not None and pipeline.metrics["port"] == 9464
