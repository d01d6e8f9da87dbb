"""The decider stage (streams.worker.decide): it never decides over a directory it could not read back."""

from __future__ import annotations

import logging
import types

import orjson
import pytest

from streams.core.errors import ClusterUnavailableError
from streams.core.hotkeys.balancer import BalanceLoop
from streams.core.hotkeys.decider import BalanceDecider, BalancePolicy
from streams.core.hotkeys.sketch import SketchSummary
from streams.core.routing.hashing import canonical_key
from streams.core.routing.router import RoutingMap
from streams.worker import decide
from streams.worker.decide import DeciderStage
from streams.worker.processor import InMessage

WINDOW_S = 5.0


def summary_message(offset: int, at_s: float) -> InMessage:
    """A summary of one instance over 4 partitions, partition 0 carrying a key with a third of the traffic."""
    counts = {0: 6000, 1: 1000, 2: 1000, 3: 1000}
    summary = SketchSummary(instance="a", window_s=WINDOW_S, span_s=WINDOW_S, total=9000, items=(("giant", 3000),),
                            max_error=0, unreported_bound=0, at_s=at_s, partition_counts=tuple(counts.items()))
    return InMessage("sketches", 0, offset, None, orjson.dumps(summary.to_record()), {})


class Directory:
    """The published directory as ``published`` reads it: unreadable while ``down``; counts its reads."""

    def __init__(self) -> None:
        self.down = True
        self.reads = 0

    def __call__(self) -> dict[str, tuple[int, ...]]:
        self.reads += 1
        if self.down:
            raise ClusterUnavailableError("cannot reach the Kafka cluster at 127.0.0.1:9: timed out")
        return {}


def test_a_directory_that_cannot_be_read_sets_summaries_aside_until_it_can(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1_000_000.0]  # the stage reads the wall clock: this one moves with the summaries
    monkeypatch.setattr(decide, "time", types.SimpleNamespace(time=lambda: clock[0]))
    directory = Directory()
    loop = BalanceLoop(BalanceDecider(BalancePolicy(partitions=4, settle_s=WINDOW_S), home=lambda key: 0),
                       WINDOW_S, 1000)
    stage = DeciderStage(loop, map_in_force=lambda: RoutingMap(version=1, partitions=4, topic="events"),
                         published=directory, instance="w-1")
    stage.assign([("sketches", 0)])
    now = clock[0]
    with caplog.at_level(logging.INFO, logger="streams.worker.decide"):
        for offset in range(3):  # an outage: each batch tries again, none raises, nothing is decided
            clock[0] = now + WINDOW_S * offset
            assert stage.handle_batch([summary_message(offset, clock[0])]) == []
        assert directory.reads == 3
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "cannot read the published directory" in warnings[0].getMessage()
        assert "127.0.0.1:9" in warnings[0].getMessage()

        directory.down = False
        outputs = []
        for offset in range(3, 12):  # the cluster is back: read once, then decide on the summaries
            clock[0] = now + WINDOW_S * offset
            outputs += stage.handle_batch([summary_message(offset, clock[0])])
    assert directory.reads == 4, "read back once, not per summary"
    assert [o.key for o in outputs] == [canonical_key("giant")] and outputs[0].role == "hot_keys"
    assert any("deciding again" in r.getMessage() for r in caplog.records)
