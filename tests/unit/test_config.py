"""Settings are validated once, name the bad field, and never show credentials."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.core.config import (
    KafkaSettings,
    ProducerSettings,
    TopicNames,
    WorkerSettings,
    load,
    redact,
)
from streams.core.errors import ConfigError


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
