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
