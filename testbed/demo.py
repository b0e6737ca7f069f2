"""Demo traffic for ``make run``: several real groups, producers, and scripted churn."""

from __future__ import annotations

import itertools
import logging
import random
import threading

from testbed.workload import Admin, Member, RateProducer, leave_all

log = logging.getLogger("demo")

TOPICS = {"demo-orders": 6, "demo-payments": 4, "demo-clicks": 8}
# group -> (topics, assignor, protocol, members, static, per-poll delay ms: >0 makes lag)
GROUPS: dict[str, tuple[list[str], str, str, int, bool, int]] = {
    "demo-range": (["demo-orders", "demo-payments"], "range", "classic", 3, False, 0),
    "demo-roundrobin": (["demo-orders", "demo-payments"], "roundrobin", "classic", 2, False, 0),
    "demo-sticky": (["demo-clicks"], "sticky", "classic", 3, False, 0),
    "demo-cooperative": (["demo-clicks"], "cooperative-sticky", "classic", 3, False, 0),
    "demo-static": (["demo-orders"], "range", "classic", 2, True, 0),
    "demo-slow": (["demo-clicks"], "range", "classic", 2, False, 400),
    "demo-kip848": (["demo-orders", "demo-clicks"], "range", "consumer", 2, False, 0),
    "demo-storm": (["demo-payments"], "range", "classic", 1, False, 0),
}
# A member of this group joins and leaves in a loop: the rebalance storm the alerts are for.
STORM_GROUP = "demo-storm"


class Demo:
    """Runs the demo groups until ``stop()``; a churn step every ``churn_seconds``."""

    def __init__(self, bootstrap: str, churn_seconds: float = 20.0, rate: float = 20.0,
                 storm_seconds: float = 12.0) -> None:
        self.bootstrap = bootstrap
        self.churn_seconds = churn_seconds
        self.storm_seconds = storm_seconds
        self.rate = rate
        self.members: dict[str, list[Member]] = {}
        self._ids = itertools.count()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._churn, daemon=True, name="demo-churn"),
                         threading.Thread(target=self._storm, daemon=True, name="demo-storm")]
        self._producer: RateProducer | None = None
        self._random = random.Random(7)

    def start(self) -> Demo:
        admin = Admin(self.bootstrap)
        try:
            for topic, partitions in TOPICS.items():
                admin.create_topic(topic, partitions)
        finally:
            admin.close()
        self._producer = RateProducer(self.bootstrap, list(TOPICS), self.rate)
        self._producer.start()
        for group, (_, _, _, count, _, _) in GROUPS.items():
            self.members[group] = [self._member(group) for _ in range(count)]
        for thread in self._threads:
            thread.start()
        return self

    def _member(self, group: str, instance_id: str | None = None) -> Member:
        topics, assignor, protocol, _, static, delay = GROUPS[group]
        n = next(self._ids)
        if static and instance_id is None:
            instance_id = f"{group}-instance-{n}"
        return Member(self.bootstrap, group, topics, f"{group}-c{n}", assignor=assignor, protocol=protocol,
                      instance_id=instance_id, process_delay_ms=delay).start()

    def _churn(self) -> None:
        actions = [self._join, self._leave, self._crash, self._restart_static, self._grow_topic]
        while not self._stop.wait(self.churn_seconds):
            try:
                self._random.choice(actions)()
            except Exception:  # a demo step failing must not end the demo
                log.exception("churn step failed")

    def _storm(self) -> None:
        """Every ``storm_seconds`` a second member joins the storm group or leaves it again."""
        while not self._stop.wait(self.storm_seconds):
            try:
                members = self.members[STORM_GROUP]
                if len(members) > 1:
                    members.pop().leave()
                else:
                    members.append(self._member(STORM_GROUP))
            except Exception:  # a demo step failing must not end the demo
                log.exception("storm step failed")

    def _pick(self, static: bool | None = None) -> str:
        groups = [g for g, spec in GROUPS.items()
                  if g != STORM_GROUP and (static is None or spec[4] == static)]
        return self._random.choice(groups)

    def _join(self) -> None:
        group = self._pick(static=False)
        if len(self.members[group]) < 5:
            self.members[group].append(self._member(group))
            log.info("demo: a member joins %s", group)

    def _leave(self) -> None:
        group = self._pick(static=False)
        if len(self.members[group]) > 1:
            self.members[group].pop(0).leave()
            log.info("demo: a member leaves %s", group)

    def _crash(self) -> None:
        group = self._pick(static=False)
        if len(self.members[group]) > 1:
            self.members[group].pop(0).crash()
            log.info("demo: a member of %s crashes", group)

    def _restart_static(self) -> None:
        group = self._pick(static=True)
        old = self.members[group].pop(0)
        old.crash()
        self.members[group].append(self._member(group, instance_id=old.instance_id))
        log.info("demo: static member %s of %s restarts", old.instance_id, group)

    def _grow_topic(self) -> None:
        """A topic gains a partition (at most doubling it): every subscribed group rebalances."""
        topic = self._random.choice(list(TOPICS))
        admin = Admin(self.bootstrap)
        try:
            current = len(admin.partitions(topic))
            if current < 2 * TOPICS[topic]:
                admin.add_partitions(topic, current + 1)
                log.info("demo: %s grows to %d partitions", topic, current + 1)
        finally:
            admin.close()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(10)
        if self._producer is not None:
            self._producer.stop()
        leave_all((m for members in self.members.values() for m in members), timeout=10)
