"""The ``streams`` command as a user runs it (a subprocess), for everything that needs no broker."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest

from streams.core.config import WorkerSettings, load
from streams.core.ids import DISCORD_EPOCH_MS, TWITTER_EPOCH_MS, Snowflake
from streams.core.routing.hashing import canonical_key
from streams.core.routing.placement import make_placer
from streams.core.routing.router import Router, RoutingMap
from streams.core.simulate import Workload, generate_keys
from streams.core.time.buckets import TimeBuckets

ROOT = Path(__file__).resolve().parents[2]
RFC_UUID7 = "017F22E2-79B0-7CC3-98C4-DC0C0C07398F"  # RFC 9562, appendix A.6
DISCORD_EXAMPLE = 175928847299117063  # Discord's API reference: 2016-04-30 11:18:25.796 UTC, worker 1, process 0, inc 7


def streams(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``python -m streams.cli ARGS`` with no STREAMS_* settings leaking in from the caller."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STREAMS_") and k != "KAFKA_BOOTSTRAP"}
    return subprocess.run([sys.executable, "-m", "streams.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**clean, **(env or {})}, cwd=ROOT)


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """Assert the run failed with status 1 and exactly one ``streams: error:`` line; return it."""
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("streams: error: ")
    assert "Traceback" not in result.stderr
    return lines[0]


# --- inspect-id ------------------------------------------------------------------------------


def test_inspect_id_prints_the_rfc_9562_example_uuid7_timestamp() -> None:
    result = streams("inspect-id", RFC_UUID7)
    assert result.returncode == 0, result.stderr
    assert "2022-02-22T19:22:22" in result.stdout
    assert "uuid7" in result.stdout
    assert "1645557742000" in result.stdout


def test_inspect_id_json_gives_the_uuid7_fields_and_its_bucket() -> None:
    result = streams("inspect-id", RFC_UUID7.lower().replace("-", ""), "--bucket-width", "5m", "--json")
    assert result.returncode == 0, result.stderr
    record = orjson.loads(result.stdout)
    ms = int(RFC_UUID7.replace("-", "")[:12], 16)
    assert record["kind"] == "uuid7"
    assert record["id"] == RFC_UUID7.lower()
    assert record["timestamp_ms"] == ms == 1645557742000
    assert record["time"] == "2022-02-22T19:22:22.000Z"
    assert record["worker"] is None and record["sequence"] is None
    assert record["bucket"] == {
        "width": "5m", "label": "20220222T1920Z", "start_ms": ms - ms % 300_000,
        "end_ms": ms - ms % 300_000 + 300_000, "start": "2022-02-22T19:20:00.000Z", "end": "2022-02-22T19:25:00.000Z",
    }


def test_inspect_id_decodes_discords_documented_snowflake() -> None:
    result = streams("inspect-id", str(DISCORD_EXAMPLE), "--layout", "discord", "--json")
    assert result.returncode == 0, result.stderr
    record = orjson.loads(result.stdout)
    assert record["kind"] == "snowflake" and record["layout"] == "discord"
    assert record["timestamp_ms"] == (DISCORD_EXAMPLE >> 22) + DISCORD_EPOCH_MS
    assert record["time"] == "2016-04-30T11:18:25.796Z"
    assert record["worker"] == (DISCORD_EXAMPLE >> 12) & 0x3FF == (1 << 5) | 0
    assert record["sequence"] == DISCORD_EXAMPLE & 0xFFF == 7


def test_inspect_id_reads_a_freshly_generated_twitter_snowflake_back() -> None:
    before = int(time.time() * 1000)
    value = Snowflake(worker_id=77).next()
    result = streams("inspect-id", str(value))
    assert result.returncode == 0, result.stderr
    fields = dict(line.split(None, 1) for line in result.stdout.splitlines()[1:] if line.strip())
    assert fields["kind"] == "snowflake" and fields["layout"] == "twitter"
    assert fields["worker"] == "77"
    assert int(fields["timestamp_ms"]) == (value >> 22) + TWITTER_EPOCH_MS
    assert before <= int(fields["timestamp_ms"]) <= before + 60_000


@pytest.mark.parametrize(("bad_id", "problem"), [
    ("9dcd1c3b-1b4a-4c8b-9c5e-0b0b0b0b0b0b", "UUID version 4, expected 7"),
    ("not-an-id", "neither UUID text"),
    ("123456789012345678901234", "too long for a Snowflake"),
    ("00000000-0000-0000-0000-000000000000", "the nil UUID"),
])
def test_a_bad_id_gives_one_line_naming_the_problem_and_exit_1(bad_id: str, problem: str) -> None:
    result = streams("inspect-id", bad_id)
    assert problem in one_error_line(result)
    assert result.stdout == ""


def test_a_bad_bucket_width_gives_one_line_and_exit_1() -> None:
    assert "bucket width '7m'" in one_error_line(streams("inspect-id", RFC_UUID7, "--bucket-width", "7m"))


# --- simulate ----------------------------------------------------------------------------------


def test_simulate_json_matches_a_direct_routing_of_the_same_seeded_zipf_keys() -> None:
    result = streams("simulate", "--distribution", "zipf", "--keys", "800", "--zipf-exponent", "1.2",
                     "--events", "40000", "--seed", "42", "--partitions", "10", "--placement", "jump",
                     "--hash", "xxh3", "--window-s", "20", "--json")
    assert result.returncode == 0, result.stderr
    report = orjson.loads(result.stdout)

    keys = generate_keys(Workload("zipf", keys=800, zipf_exponent=1.2, seed=42), 40_000)
    router = Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=10, topic="t", placement="jump", hash="xxh3")])
    before = Counter(router.route(key, 0).partition for key in keys)
    assert report["placed"], "the workload must be unbalanced for the directory half to mean anything"
    for placed in report["placed"]:
        router.directory.set(canonical_key(placed["key"]), tuple(placed["partitions"]), 10)
    after = Counter(router.route(key, 0, event_id).partition for event_id, key in enumerate(keys))

    assert report["events"] == 40_000 and report["distinct_keys"] == len(set(keys))
    assert report["before"]["loads"] == [before[p] for p in range(10)]
    assert report["before"]["max"] == max(before.values())
    assert report["before"]["mean"] == 4000.0
    assert report["before"]["max_over_mean"] == pytest.approx(max(before.values()) / 4000)
    assert report["after"]["loads"] == [after[p] for p in range(10)]
    assert report["after"]["max_over_mean"] == pytest.approx(max(after.values()) / 4000)
    assert report["after"]["max_over_mean"] <= 1.10
    distinct = {canonical_key(k) for k in keys}
    for placement in ("mod", "jump"):
        before, after = make_placer("xxh3", placement, 10), make_placer("xxh3", placement, 11)
        assert report["growth"][placement]["moved_keys"] == sum(before(kb) != after(kb) for kb in distinct)
    assert report["growth"]["ideal_fraction"] == 1 / 11


def test_simulate_prints_plain_text_without_a_terminal() -> None:
    result = streams("simulate", "--events", "5000", "--partitions", "4")
    assert result.returncode == 0, result.stderr
    assert "\x1b[" not in result.stdout and "┃" not in result.stdout and "│" not in result.stdout
    for heading in ("events per partition", "balance", "growth 4 -> 5 partitions", "ideal: 1/(N+1) = 20.0%"):
        assert heading in result.stdout


def test_simulate_reads_real_keys_from_a_csv_column(tmp_path: Path) -> None:
    path = tmp_path / "events.csv"
    path.write_text("user,amount\n" + "".join(f"{'whale' if i % 2 else f'u{i}'},{i}\n" for i in range(4000)))
    result = streams("simulate", "--keys-file", str(path), "--csv-column", "user", "--partitions", "8", "--json")
    assert result.returncode == 0, result.stderr
    report = orjson.loads(result.stdout)
    assert report["events"] == 4000 and report["distinct_keys"] == 2001
    # 400 events/s in all over the 10 s window, fair share 50/s: the whale's 200/s must be split.
    assert [(p["key"], p["count"], p["kind"]) for p in report["placed"]] == [("whale", 2000, "split")]
    assert report["after"]["max_over_mean"] <= 1.10


def test_simulate_names_the_flags_of_an_inconsistent_pair() -> None:
    line = one_error_line(streams("simulate", "--events", "1000", "--balance-aim", "1.2"))
    assert "--balance-aim" in line and "--balance-target" in line and "at the default" in line


def test_simulate_accepts_a_low_target_with_a_matching_aim() -> None:
    result = streams("simulate", "--events", "20000", "--balance-target", "1.02", "--balance-aim", "1.01", "--json")
    assert result.returncode == 0, result.stderr
    assert orjson.loads(result.stdout)["policy"]["balance_target"] == 1.02


def test_simulate_with_a_missing_keys_file_gives_one_line() -> None:
    line = one_error_line(streams("simulate", "--keys-file", "/nonexistent/keys.txt"))
    assert "/nonexistent/keys.txt" in line and "No such file" in line


def test_simulate_plot_draws_a_png_or_says_matplotlib_is_missing(tmp_path: Path) -> None:
    target = tmp_path / "loads.png"
    result = streams("simulate", "--events", "2000", "--plot", str(target))
    if importlib.util.find_spec("matplotlib") is None:
        assert "pip install 'streams-partitioner[plot]'" in one_error_line(result)
        assert not target.exists()
    else:
        assert result.returncode == 0, result.stderr
        assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert result.stdout.splitlines()[-1] == f"plot written to {target.resolve()}"
        as_json = streams("simulate", "--events", "2000", "--json", "--plot", str(target))
        assert orjson.loads(as_json.stdout)["partitions"] == 12, "stdout stays JSON"
        assert f"plot written to {target.resolve()}" in as_json.stderr


def test_the_simulate_plot_keeps_its_title_in_the_figure_and_its_legend_off_the_bars() -> None:
    if importlib.util.find_spec("matplotlib") is None:  # the 'plot' extra; the line above tests its absence
        return
    from streams.cli.simulate import plot_figure
    from streams.core.simulate import simulate

    keys = generate_keys(Workload(distribution="zipf", keys=1000, seed=0), 20_000)
    for partitions in (12, 48):
        fig = plot_figure(simulate(keys, partitions=partitions, source="zipf(keys=1000, s=1.1, seed=0) " * 2))
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        ax = fig.axes[0]
        figure_box = fig.bbox
        title = ax.title.get_window_extent(renderer)
        assert figure_box.x0 <= title.x0 and title.x1 <= figure_box.x1 and title.y1 <= figure_box.y1
        legend = ax.get_legend().get_window_extent(renderer)
        assert not legend.overlaps(ax.get_window_extent(renderer)), "the legend sits outside the axes"


def test_an_out_of_range_flag_value_gives_one_line_naming_the_field() -> None:
    assert "elephants must be" in one_error_line(
        streams("simulate", "--distribution", "tenants", "--keys", "3", "--elephants", "3"))


# --- usage, debug, the broker being away --------------------------------------------------------


def test_an_unknown_flag_is_an_argparse_usage_error_with_exit_2() -> None:
    result = streams("simulate", "--no-such-flag")
    assert result.returncode == 2
    assert result.stderr.startswith("usage: streams")
    assert "error: unrecognized arguments: --no-such-flag" in result.stderr


def test_a_flag_value_of_the_wrong_type_is_an_argparse_usage_error_with_exit_2() -> None:
    result = streams("simulate", "--partitions", "many")
    assert result.returncode == 2
    assert result.stderr.startswith("usage: streams simulate")
    assert "streams simulate: error: argument --partitions: 'many' is not an integer" in result.stderr


def test_a_missing_subcommand_is_a_usage_error_with_exit_2() -> None:
    result = streams()
    assert result.returncode == 2 and "usage: streams" in result.stderr


@pytest.mark.parametrize("command", ["produce", "simulate", "inspect-id", "topics", "topics roll"])
def test_every_command_has_help_with_examples(command: str) -> None:
    result = streams(*command.split(), "--help")
    assert result.returncode == 0 and "example" in result.stdout


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_shows_the_traceback_before_the_error_line(where: str) -> None:
    args = ["--debug", "inspect-id", "nope"] if where == "before" else ["inspect-id", "nope", "--debug"]
    result = streams(*args)
    assert result.returncode == 1
    assert result.stderr.startswith("Traceback (most recent call last):")
    assert "streams.core.errors.InvalidIdError" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("streams: error: str is neither UUID text")


def test_produce_to_an_unreachable_broker_fails_with_one_line_in_bounded_time() -> None:
    started = time.monotonic()
    result = streams("produce", "--bootstrap-server", "127.0.0.1:1", "--count", "10", "--topic", "x")
    elapsed = time.monotonic() - started
    line = one_error_line(result)
    assert "cannot reach the Kafka cluster at 127.0.0.1:1" in line
    assert elapsed < 30
    assert result.stdout == ""


def test_topics_describe_against_an_unreachable_broker_honours_the_timeout() -> None:
    started = time.monotonic()
    line = one_error_line(streams("topics", "describe", "--bootstrap-server", "127.0.0.1:1", "--timeout", "2s"))
    assert "within 2 s" in line
    assert time.monotonic() - started < 15


def test_credentials_never_appear_in_an_error() -> None:
    result = streams("produce", "--topic", "x", "--count", "1",
                     env={"STREAMS_KAFKA_SASL_PASSWORD": "hunter2-secret", "STREAMS_KAFKA_SECURITY_PROTOCOL": "nonsense"})
    line = one_error_line(result)
    assert "security.protocol" in line and "'sasl.password': '***'" in line
    assert "hunter2-secret" not in result.stderr + result.stdout


def test_the_console_script_runs_the_same_main() -> None:
    script = Path(sys.executable).parent / "streams"
    result = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "streams 0.1.0"


# --- settings: one vocabulary, booleans that parse, where each value came from -------------------


def dry_run_settings(*args: str, env: dict[str, str] | None = None) -> dict:
    """``streams worker --dry-run --json ARGS``: the settings record (section -> name -> value, source, from)."""
    result = streams("worker", "--dry-run", "--json", *args, env=env)
    assert result.returncode == 0, result.stderr
    return orjson.loads(result.stdout)  # type: ignore[no-any-return]


def test_boolean_flags_take_false_as_false() -> None:
    dry = dry_run_settings("--balance-enabled", "false", "--balance-moves", "false", "--dedup-ids", "false")
    worker = dry["settings"]["worker"]
    for name in ("balance_enabled", "balance_moves", "dedup_ids"):
        assert worker[name] == {"value": False, "source": "flag", "from": "--" + name.replace("_", "-")}
        assert dry["env"]["STREAMS_" + name.upper()] == "false"


@pytest.mark.parametrize(("word", "value"), [("true", True), ("YES", True), ("1", True), ("on", True),
                                             ("False", False), ("no", False), ("0", False), ("OFF", False)])
def test_boolean_flags_parse_every_spelling(word: str, value: bool) -> None:
    assert dry_run_settings("--dedup-ids", word)["settings"]["worker"]["dedup_ids"]["value"] is value


def test_a_bare_boolean_flag_is_true_and_no_flags_are_false() -> None:
    worker = dry_run_settings("--dedup-ids", "--no-balance", "--no-balance-moves",
                              env={"STREAMS_DEDUP_IDS": "false"})["settings"]["worker"]
    assert worker["dedup_ids"]["value"] is True and worker["dedup_ids"]["source"] == "flag"
    assert worker["balance_enabled"]["value"] is False and worker["balance_moves"]["value"] is False


def test_the_decider_trigger_flags_reach_the_policy_the_worker_builds() -> None:
    dry = dry_run_settings("--balance-confidence", "0.999", "--balance-evidence-windows", "3",
                           env={"STREAMS_BALANCE_EVIDENCE_WINDOWS": "5"})
    worker = dry["settings"]["worker"]
    assert worker["balance_confidence"] == {"value": 0.999, "source": "flag", "from": "--balance-confidence"}
    assert worker["balance_evidence_windows"]["value"] == 3 and worker["balance_evidence_windows"]["source"] == "flag"
    # The faust worker loads its settings from this environment (streams.worker.app) and builds its decider
    # from settings.balance_policy().
    policy = load(WorkerSettings, env=dry["env"]).balance_policy()
    assert (policy.confidence, policy.evidence_windows) == (0.999, 3)


def test_a_boolean_flag_with_any_other_value_is_a_usage_error_naming_the_flag() -> None:
    result = streams("worker", "--dry-run", "--balance-enabled", "nope")
    assert result.returncode == 2
    assert "argument --balance-enabled" in result.stderr and "'nope' is not a boolean" in result.stderr


def test_no_flag_of_any_command_uses_type_bool() -> None:
    from streams.cli import _all_subparsers, build_parser

    parser, _ = build_parser()
    subparsers = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for sub in _all_subparsers(subparsers):  # type: ignore[arg-type]
        assert not [a.dest for a in sub._actions if a.type is bool], sub.prog
    assert not [p for p in (ROOT / "streams").rglob("*.py") if "type=bool" in p.read_text()]


def test_dry_run_says_where_each_setting_came_from(tmp_path: Path) -> None:
    config = tmp_path / "streams.toml"
    config.write_text('[worker]\ngrace = "3s"\nbucket_width = "1h"\n[topics]\nhot_keys_topic = "file.hot-keys"\n')
    dry = dry_run_settings("--partitions", "4", "--config", str(config),
                           env={"STREAMS_BUCKET_WIDTH": "5m", "STREAMS_EVENTS_TOPIC": "env.events"})
    worker, topics = dry["settings"]["worker"], dry["settings"]["topics"]
    assert worker["partitions"] == {"value": 4, "source": "flag", "from": "--partitions"}
    assert worker["bucket_width"] == {"value": "5m", "source": "env", "from": "STREAMS_BUCKET_WIDTH"}  # env > file
    assert worker["grace"] == {"value": "3s", "source": "file", "from": f"{config} [worker]"}
    assert worker["retention"] == {"value": "1h", "source": "default", "from": ""}
    assert topics["events_topic"] == {"value": "env.events", "source": "env", "from": "STREAMS_EVENTS_TOPIC"}
    assert topics["hot_keys_topic"]["value"] == "file.hot-keys" and topics["hot_keys_topic"]["source"] == "file"
    # What the worker will see: the variables it inherits as well as those the flags set.
    assert dry["env"]["STREAMS_BUCKET_WIDTH"] == "5m" and dry["env"]["STREAMS_PARTITIONS"] == "4"
    assert dry["env"]["STREAMS_CONFIG"] == str(config)


def test_the_old_topic_variable_still_works_and_the_new_name_wins() -> None:
    topics = dry_run_settings(env={"STREAMS_EVENTS": "old.events", "STREAMS_LATE_EVENTS": "old.late",
                                   "STREAMS_LATE_EVENTS_TOPIC": "new.late"})["settings"]["topics"]
    assert topics["events_topic"] == {"value": "old.events", "source": "env",
                                      "from": "STREAMS_EVENTS (deprecated: use STREAMS_EVENTS_TOPIC)"}
    assert topics["late_events_topic"] == {"value": "new.late", "source": "env", "from": "STREAMS_LATE_EVENTS_TOPIC"}


def test_every_worker_setting_has_one_name_for_its_flag_and_its_variable() -> None:
    import dataclasses

    from streams.core.config import TopicNames, WorkerSettings, env_var, flag, setting_name

    help_text = streams("worker", "--help").stdout
    for cls in (WorkerSettings, TopicNames):
        for f in dataclasses.fields(cls):
            name = setting_name(cls, f.name)
            assert flag(name) in help_text and f"${env_var(name)}" in help_text.replace("\n", " ").replace(
                "  ", ""), name


def test_inspect_id_takes_the_bucket_width_from_the_environment_and_the_config_file(tmp_path: Path) -> None:
    def width(*args: str, env: dict[str, str] | None = None) -> str:
        result = streams("inspect-id", RFC_UUID7, "--json", *args, env=env)
        assert result.returncode == 0, result.stderr
        return orjson.loads(result.stdout)["bucket"]["width"]  # type: ignore[no-any-return]

    config = tmp_path / "streams.toml"
    config.write_text('[worker]\nbucket_width = "1h"\n')
    assert width() == "1m"
    assert width(env={"STREAMS_BUCKET_WIDTH": "5m"}) == "5m"
    assert width("--config", str(config)) == "1h"
    assert width(env={"STREAMS_CONFIG": str(config)}) == "1h"
    assert width("--bucket-width", "15m", env={"STREAMS_BUCKET_WIDTH": "5m"}) == "15m"
    top_level = streams("--config", str(config), "inspect-id", RFC_UUID7, "--json")
    assert orjson.loads(top_level.stdout)["bucket"]["width"] == "1h"


@pytest.mark.parametrize("where", ["before", "after"])
def test_config_is_read_before_or_after_the_command(where: str, tmp_path: Path) -> None:
    config = tmp_path / "streams.toml"
    config.write_text('[worker]\ngrace = "7s"\n')
    args = ["--config", str(config), "worker", "--dry-run", "--json"] if where == "before" else [
        "worker", "--dry-run", "--json", "--config", str(config)]
    result = streams(*args)
    assert result.returncode == 0, result.stderr
    assert orjson.loads(result.stdout)["settings"]["worker"]["grace"] == {
        "value": "7s", "source": "file", "from": f"{config} [worker]"}
