"""Settings are validated once, name the bad field, and never show credentials."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from streams.core.config import (
    BALANCE_SETTINGS,
    KafkaSettings,
    ProducerSettings,
    TopicNames,
    WorkerSettings,
    install_log_redaction,
    known_secrets,
    load,
    parse_client_properties,
    redact,
    scrub,
    secret_values,
)
from streams.core.errors import ConfigError
from streams.core.hotkeys.decider import BalancePolicy


def test_environment_variables_override_defaults_and_are_coerced_to_the_field_type() -> None:
    s = load(ProducerSettings, env={"STREAMS_PARTITIONS": "24", "STREAMS_SNOWFLAKE_WORKER": "7"})
    assert s.partitions == 24 and s.snowflake_worker == 7
    w = load(WorkerSettings, env={"STREAMS_BALANCE_MOVES": "false"})
    assert w.balance_moves is False


def test_toml_file_then_env_then_keywords_win_in_that_order(tmp_path: Path) -> None:
    cfg = tmp_path / "streams.toml"
    cfg.write_text('[producer]\npartitions = 6\nplacement = "jump"\nhash = "xxh3"\n')
    s = load(ProducerSettings, toml_path=cfg, env={"STREAMS_PARTITIONS": "8"}, serializer="avro")
    assert (s.partitions, s.placement, s.hash, s.serializer) == (8, "jump", "xxh3", "avro")


def test_out_of_range_value_names_the_field_and_the_allowed_range() -> None:
    with pytest.raises(ConfigError, match=r"partitions must be an int in \[1, 100000\], got 0"):
        load(ProducerSettings, env={"STREAMS_PARTITIONS": "0"})


def test_a_value_of_the_wrong_type_names_its_source() -> None:
    with pytest.raises(ConfigError, match=r"partitions \(from \$STREAMS_PARTITIONS\) must be int"):
        load(ProducerSettings, env={"STREAMS_PARTITIONS": "twelve"})


def test_unknown_setting_in_a_toml_file_is_rejected(tmp_path: Path) -> None:
    cfg = tmp_path / "streams.toml"
    cfg.write_text("[worker]\nhot_treshold = 3\n")
    with pytest.raises(ConfigError, match="has no setting 'hot_treshold'"):
        load(WorkerSettings, toml_path=cfg, env={})


def test_kafka_client_properties_come_from_streams_kafka_variables_and_are_redacted_in_repr() -> None:
    s = load(KafkaSettings, env={"STREAMS_BOOTSTRAP_SERVERS": "b:9092", "STREAMS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                                 "STREAMS_KAFKA_SASL_PASSWORD": "hunter2"})
    assert s.client_config()["sasl.password"] == "hunter2"
    assert s.client_config()["security.protocol"] == "SASL_SSL"
    assert "hunter2" not in repr(s) and "hunter2" not in str(s)
    assert redact(s.client_config())["sasl.password"] == "***"


def test_topic_names_must_be_legal_kafka_names_except_for_the_bucket_placeholder() -> None:
    assert TopicNames(events="events.{bucket}").events == "events.{bucket}"
    with pytest.raises(ConfigError, match="events must be a Kafka topic name"):
        TopicNames(events="bad topic!")


def test_every_balance_policy_knob_is_a_worker_setting_and_the_defaults_agree() -> None:
    fields = {f.name for f in dataclasses.fields(BalancePolicy)}
    assert BALANCE_SETTINGS.keys() == fields
    assert WorkerSettings().balance_policy() == BalancePolicy(partitions=WorkerSettings().partitions)


def test_the_decider_trigger_settings_from_the_environment_reach_the_workers_policy(tmp_path: Path) -> None:
    env = {"STREAMS_BALANCE_CONFIDENCE": "0.999", "STREAMS_BALANCE_EVIDENCE_WINDOWS": "3"}
    policy = load(WorkerSettings, env=env).balance_policy()  # what streams.worker.app hands its BalanceDecider
    assert (policy.confidence, policy.evidence_windows) == (0.999, 3)
    cfg = tmp_path / "streams.toml"
    cfg.write_text("[worker]\nbalance_confidence = 0.95\nbalance_evidence_windows = 2\n")
    policy = load(WorkerSettings, toml_path=cfg, env={}).balance_policy()
    assert (policy.confidence, policy.evidence_windows) == (0.95, 2)


@pytest.mark.parametrize(("name", "value", "message"), [
    ("BALANCE_CONFIDENCE", "1.0", r"balance_confidence must be a number in \[0.5, 0.999999\], got 1.0"),
    ("BALANCE_CONFIDENCE", "0.4", r"balance_confidence must be a number in \[0.5, 0.999999\], got 0.4"),
    ("BALANCE_EVIDENCE_WINDOWS", "0", r"balance_evidence_windows must be an int in \[1, 1000\], got 0"),
    ("BALANCE_EVIDENCE_WINDOWS", "1001", r"balance_evidence_windows must be an int in \[1, 1000\], got 1001"),
])
def test_a_decider_trigger_setting_out_of_range_names_the_setting(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(WorkerSettings, env={f"STREAMS_{name}": value})


# --- redaction by value (issue 14, item 7) ---------------------------------------------------


def test_string_shaped_client_properties_in_toml_are_parsed_and_the_password_never_shown(tmp_path: Path) -> None:
    cfg = tmp_path / "streams.toml"
    cfg.write_text('[kafka]\nclient_properties = "security.protocol=SASL_PLAINTEXT,sasl.username=bob,'
                   'sasl.password=str-shaped-secret-1"\n')
    s = load(KafkaSettings, toml_path=cfg, env={})
    assert s.client_config()["sasl.password"] == "str-shaped-secret-1"
    assert s.client_config()["security.protocol"] == "SASL_PLAINTEXT"
    assert "str-shaped-secret-1" not in repr(s)
    assert "str-shaped-secret-1" in known_secrets()


def test_client_properties_as_key_value_lines_keep_commas_inside_values() -> None:
    props = parse_client_properties("# tls\nssl.cipher.suites=A,B\nsasl.password = p=w,x\n")
    assert props == {"ssl.cipher.suites": "A,B", "sasl.password": "p=w,x"}
    assert parse_client_properties("ssl.cipher.suites=A,B,sasl.username=u") == {
        "ssl.cipher.suites": "A,B", "sasl.username": "u"}


def test_a_malformed_client_properties_string_is_refused_without_echoing_it(tmp_path: Path) -> None:
    cfg = tmp_path / "streams.toml"
    cfg.write_text('[kafka]\nclient_properties = "=malformed-secret-2"\n')
    with pytest.raises(ConfigError) as info:
        load(KafkaSettings, toml_path=cfg, env={})
    assert "client_properties" in str(info.value) and "item 1" in str(info.value)
    assert "malformed-secret-2" not in str(info.value)


def test_a_client_properties_value_of_the_wrong_shape_is_not_echoed(tmp_path: Path) -> None:
    cfg = tmp_path / "streams.toml"
    cfg.write_text('[kafka]\nclient_properties = ["sasl.password=list-secret-3"]\n')
    with pytest.raises(ConfigError, match=r"client_properties .* got \*\*\*") as info:
        load(KafkaSettings, toml_path=cfg, env={})
    assert "list-secret-3" not in str(info.value)


def test_scrub_replaces_every_known_secret_value_wherever_it_appears() -> None:
    KafkaSettings(client_properties={"sasl.password": "scrub-secret-4", "sasl.username": "u"})
    text = "connect failed: bad credentials scrub-secret-4 for u (scrub-secret-4)"
    assert scrub(text) == "connect failed: bad credentials *** for u (***)"
    assert scrub("nothing here") == "nothing here"


def test_redact_masks_secret_names_and_secret_values_under_other_names() -> None:
    config = {"sasl.password": "redact-secret-5", "client.id": "app-redact-secret-5", "acks": "all", "linger.ms": 5}
    assert redact(config) == {"sasl.password": "***", "client.id": "app-***", "acks": "all", "linger.ms": 5}


def test_a_password_inside_a_jaas_config_is_known_on_its_own() -> None:
    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="jaas-secret-6";'
    assert "jaas-secret-6" in secret_values({"sasl.jaas.config": jaas})
    assert secret_values({"sasl.password": "abc"}) == frozenset()  # too short to scrub from free text


def test_the_environment_variable_password_is_scrubbed_from_log_records(caplog: pytest.LogCaptureFixture) -> None:
    load(KafkaSettings, env={"STREAMS_KAFKA_SASL_PASSWORD": "env-secret-7"})
    install_log_redaction()
    log = logging.getLogger("streams.test.redaction")
    with caplog.at_level(logging.INFO, logger="streams.test.redaction"):
        log.info("authenticating with %s", "env-secret-7")
        try:
            raise RuntimeError("rejected env-secret-7")
        except RuntimeError:
            log.exception("failed")
    assert "env-secret-7" not in caplog.text
    assert "authenticating with ***" in caplog.text and "rejected ***" in caplog.text


# --- one vocabulary: names, sources, aliases ------------------------------------------------------


def test_resolve_reports_the_source_of_every_value_and_later_sources_win(tmp_path: Path) -> None:
    from streams.core.config import Source, resolve

    cfg = tmp_path / "s.toml"
    cfg.write_text('[worker]\npartitions = 6\ngrace = "3s"\nbucket_width = "1h"\n')
    resolved = resolve(WorkerSettings, toml_path=cfg, env={"STREAMS_BUCKET_WIDTH": "5m", "STREAMS_PARTITIONS": "8"},
                       flags={"partitions": 4})
    s = resolved.settings
    assert (s.partitions, s.bucket_width, s.grace, s.retention) == (4, "5m", "3s", "1h")
    assert resolved.sources["partitions"] == Source("flag", "--partitions")
    assert resolved.sources["bucket_width"] == Source("env", "STREAMS_BUCKET_WIDTH")
    assert resolved.sources["grace"] == Source("file", f"{cfg} [worker]")
    assert resolved.sources["retention"] == Source("default")


def test_a_topic_setting_has_one_name_and_the_old_spellings_still_work(tmp_path: Path) -> None:
    import warnings

    from streams.core.config import TopicNames, env_var, flag, resolve, setting_name

    assert (setting_name(TopicNames, "late_events"), env_var("late_events_topic"), flag("late_events_topic")) == (
        "late_events_topic", "STREAMS_LATE_EVENTS_TOPIC", "--late-events-topic")
    cfg = tmp_path / "s.toml"
    cfg.write_text('[topics]\nevents = "old.events"\nhot_keys = "old.hot"\nhot_keys_topic = "new.hot"\n')
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        resolved = resolve(TopicNames, toml_path=cfg, env={"STREAMS_PARTIALS": "old.partials",
                                                           "STREAMS_SKETCHES": "old.sk", "STREAMS_SKETCHES_TOPIC": "new.sk"})
    names = resolved.settings
    assert (names.events, names.hot_keys, names.partials, names.sketches) == (
        "old.events", "new.hot", "old.partials", "new.sk")
    assert resolved.sources["sketches"].detail == "STREAMS_SKETCHES_TOPIC"
    assert {str(w.message) for w in seen} >= {"[topics] events is deprecated: use [topics] events_topic",
                                              "STREAMS_PARTIALS is deprecated: use STREAMS_PARTIALS_TOPIC"}
    with pytest.raises(ConfigError, match="has no setting 'evnets_topic'"):
        cfg.write_text('[topics]\nevnets_topic = "x"\n')
        resolve(TopicNames, toml_path=cfg, env={})
