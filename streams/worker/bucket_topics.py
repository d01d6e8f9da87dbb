"""Topic-per-bucket consumption: keep the events channel subscribed to every bucket topic.

With an events template such as ``events.{bucket}`` the producers write each bucket
to its own topic and ``streams topics roll`` creates them ahead of time. Kafka's
answer to "consume topics that appear later" is a regular-expression subscription,
but faust cannot use one: its aiokafka driver passes only topic names to
``subscribe`` (``# XXX pattern does not work``), and its conductor indexes channels
by concrete topic name (``Conductor._update_tp_index`` iterates ``topic.topics``,
empty for a pattern topic), so records of pattern-matched topics would reach no
agent. The worker therefore does the pattern matching itself:
:class:`BucketTopicSubscription` lists the cluster's topics every few seconds, keeps
those that match the template exactly (the label parses back to a bucket of the
configured width, as ``roll`` names them) and, when the set changed, updates the
events channel's topic list in place and asks faust's conductor to resubscribe,
which rebalances the group. A new bucket topic is consumed within about
``refresh_s`` + ``RESUBSCRIBE_S`` + one rebalance of being created; ``roll`` creates
topics ``ahead`` buckets early, so that delay is spent before the bucket begins.

Every bucket topic has the same partition count as the stage-1 changelog (roll
creates them so), so faust's assignor puts partition p of every bucket topic and of
the changelog on one worker (its co-partitioning groups topics by partition count).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from streams.core.time.buckets import TimeBuckets
from streams.core.topicplan import bucket_of_topic

__all__ = ["BucketTopicSubscription", "RESUBSCRIBE_S", "TopicList"]

log = logging.getLogger(__name__)

#: How long faust's conductor waits after a subscription change before resubscribing
#: (faust's default of 45 s batches agent restarts; here changes come from one timer).
RESUBSCRIBE_S = 1.0


class TopicList(list):  # type: ignore[type-arg]
    """The events channel's topic names: one list object shared by the channel and its clones.

    faust copies ``topics or []`` into every clone of a channel (the agent iterates a
    clone); a list that is always truthy keeps that one object, so updating it in place
    reaches every clone, even while it is empty.
    """

    def __bool__(self) -> bool:
        return True


class BucketTopicSubscription:
    """Follows the bucket topics of ``template`` that exist, for the faust ``app``'s events channel.

    ``names`` is the channel's :class:`TopicList`; ``list_topics()`` returns the
    cluster's topic names (blocking: run :meth:`refresh` in an executor).
    """

    def __init__(self, app: Any, template: str, buckets: TimeBuckets, names: TopicList,
                 list_topics: Callable[[], Iterable[str]]) -> None:
        self.app = app
        self.template = template
        self.buckets = buckets
        self.names = names
        self._list_topics = list_topics
        app.topics._resubscribe_sleep_lock_seconds = RESUBSCRIBE_S  # noqa: SLF001 - see RESUBSCRIBE_S

    def matches(self, topic: str) -> bool:
        """True if ``topic`` is a bucket topic of the template."""
        return bucket_of_topic(topic, self.template, self.buckets) is not None

    def wanted(self) -> list[str]:
        """The existing bucket topics, in bucket order (blocking: lists the cluster's topics)."""
        found = [(bucket_of_topic(t, self.template, self.buckets), t) for t in self._list_topics()]
        return [t for bucket, t in sorted((b.index, t) for b, t in found if b is not None)]

    def apply(self, wanted: list[str]) -> bool:
        """Make the channel's topics ``wanted``; True if faust was asked to resubscribe.

        Asks again while a subscription is pending (faust drops a change flagged during
        a rebalance), so call it on every refresh, not only when ``wanted`` changed.
        """
        subscribed = set(self.app.topics._topic_name_index)  # noqa: SLF001 - what faust last subscribed to
        if list(self.names) == wanted and set(wanted) <= subscribed:
            return False
        if self.app.rebalancing:
            return False
        if list(self.names) != wanted:
            added, removed = set(wanted) - set(self.names), set(self.names) - set(wanted)
            log.info("bucket topics: subscribing to %d (+%s, -%s)", len(wanted), sorted(added), sorted(removed))
            self.names[:] = wanted
        self.app.topics._flag_changes()  # noqa: SLF001 - faust's own "subscription changed" signal
        return True
