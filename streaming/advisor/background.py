"""The assignor advisor in the background: ``kafka_consumergroup_assignor_imbalance_ratio`` off the batch thread.

Running Kafka's four built-in assignors (:mod:`streaming.advisor.assignors`) costs about 0.6 s for a
large group, too much for a micro-batch that may change thousands of groups. So the batch
thread only *offers* each changed group (:meth:`AdvisorPass.offer`: the members, their
subscriptions and partitions, taken from what the sink renders anyway), and a daemon
thread evaluates, every ``period_s``, the groups whose members, subscriptions or assignment
differ from what it last evaluated, oldest offer first, until ``budget_s`` of the pass is
spent; the rest wait for the next pass. Results go to ``publish`` (the job renders them into
the group's series); a group that is no longer a classic consumer group with members is
published as None, so its series go. The metric therefore trails a rebalance by up to a
period, more when many groups changed at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from streaming.advisor.assignors import AdvisorMember, Outcome, advise_members
from streaming.lifecycle import PollingThread
from streaming.protocol import CLASSIC, GroupSummary, TopicPartition

log = logging.getLogger(__name__)

# group -> {assignor: imbalance ratio}, or None when the group has nothing to advise on.
Publish = Callable[[str, Mapping[str, float] | None], None]
Evaluate = Callable[[Sequence[AdvisorMember], int], Mapping[str, Outcome]]


@dataclass(frozen=True)
class AdvisorInput:
    """What one evaluation needs; ``members`` alone decides whether a group changed."""

    generation: int
    members: tuple[AdvisorMember, ...]

    def fingerprint(self) -> int:
        """A hash of the members, subscriptions and assignment: all the pass keeps per evaluated
        group (a copy of every group's assignment would double the job's memory)."""
        return hash(tuple((m.member_id, m.instance_id, m.topics,
                           tuple((t, tuple(ps)) for t, ps in m.assigned.items())) for m in self.members))


def advisor_input(summary: GroupSummary, assignments: Mapping[str, Sequence[TopicPartition]] | None
                  ) -> AdvisorInput | None:
    """The members of a classic consumer group as the assignors see them; None for any other group.

    ``assignments`` is owner key -> (topic, partition) pairs, as the sink hands them over.
    Without any assigned partition there is nothing to spread (and no partition count to
    read), so such a group is not advised either.
    """
    if (summary.group_type != CLASSIC or summary.protocol_type != "consumer" or not summary.members
            or not summary.assigned_partitions or summary.generation is None):
        return None
    members = []
    for m in summary.members:
        assigned: dict[str, list[int]] = {}
        for topic, partition in (assignments or {}).get(m.member, ()):
            assigned.setdefault(topic, []).append(partition)
        members.append(AdvisorMember(m.member_id, m.instance_id, m.subscribed_topics,
                                     {t: sorted(ps) for t, ps in sorted(assigned.items())}))
    return AdvisorInput(summary.generation, tuple(members))


class AdvisorPass(PollingThread):
    """Offers from the batch thread, evaluations on its own thread within a budget per pass; a
    component (see :mod:`streaming.lifecycle`)."""

    def __init__(self, publish: Publish, period_s: float = 5.0, budget_s: float = 1.0,
                 evaluate: Evaluate = advise_members, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__("assignor-advisor")
        self.publish = publish
        self.period_s = period_s
        self.budget_s = budget_s
        self._evaluate = evaluate
        self._clock = clock
        self._lock = threading.Lock()
        self._pending: dict[str, AdvisorInput | None] = {}  # insertion order = offer order
        self._evaluated: dict[str, int] = {}  # group -> fingerprint of what was evaluated
        self._in_flight: str | None = None  # the group being evaluated
        self._superseded = False  # offered again or forgotten while evaluated: drop the result

    def offer(self, summary: GroupSummary, assignments: Mapping[str, Sequence[TopicPartition]] | None) -> None:
        """A group changed (batch thread): queue it if what the assignors would see changed."""
        found = advisor_input(summary, assignments)
        group = summary.group
        with self._lock:
            if group == self._in_flight:
                self._superseded = True
            if found is None:
                if group in self._evaluated or group in self._pending:
                    self._evaluated.pop(group, None)
                    self._pending[group] = None  # its published series must go
                return
            if group not in self._pending and self._evaluated.get(group) == found.fingerprint():
                return
            self._pending[group] = found

    def forget(self, group: str) -> None:
        """The group is gone (deleted or expired): nothing to evaluate or publish for it."""
        with self._lock:
            if group == self._in_flight:
                self._superseded = True
            self._pending.pop(group, None)
            self._evaluated.pop(group, None)

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def run_pass(self) -> int:
        """Evaluate queued groups until the budget is spent (at least one); returns how many."""
        started, done = self._clock(), 0
        while done == 0 or self._clock() - started < self.budget_s:
            with self._lock:
                if not self._pending:
                    break
                group = next(iter(self._pending))
                found = self._pending.pop(group)
                self._in_flight, self._superseded = group, False
            done += 1
            if found is None:
                self.publish(group, None)
                continue
            try:
                outcomes = self._evaluate(found.members, found.generation)
            except Exception:  # an assignor refusing odd input must not stop the pass
                log.exception("assignor advisor failed for group %s", group)
                outcomes = {}
            with self._lock:
                self._in_flight = None
                if self._superseded:
                    continue  # offered again (queued anew) or forgotten meanwhile
                self._evaluated[group] = found.fingerprint()
            ratios = {name: o.imbalance_ratio for name, o in outcomes.items() if o.imbalance_ratio is not None}
            self.publish(group, ratios or None)
        return done

    def _run(self) -> None:
        while not self._stopping.wait(self.period_s):
            self.run_pass()
