"""The rebalance definition end to end: real broker (4.3.1, or KAFKA_VERSION=3.9.2), real clients, the real job.

What is asserted is the documented definition (README, ``streaming/state.py``), read from the
job's /metrics and its event log: a rebalance is a completed assignment with members whose
generation changed; creation is a baseline; going Empty is counted apart; each rebalance names
its causes and how each leaver left. Client generation deltas are never the oracle; a client is
asked at most which assignments it completed (each one is a generation Kafka wrote).

Scenarios that need no ordering between them run at once, one group each, on threads: their
waits (session and poll timeouts) overlap instead of adding up.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest

from streaming.protocol import RebalanceEvent
from testbed.workload import Admin, Member, leave_all, start_members, wait_balanced, wait_until
from tests.support.exposition import Samples, series, value
from tests.support.monitor_helpers import scrape, wait_for, wait_generation

pytestmark = pytest.mark.slow

# Short timeouts keep departures fast: a crash is noticed after 6 s, a stuck poll loop after 8 s.
SESSION_MS = 6000
POLL_INTERVAL_MS = 8000


@dataclass
class Env:
    """What every scenario needs; ``members`` is the fixture's list (all killed at the end)."""

    bootstrap: str
    admin: Admin
    monitor: object
    members: list[Member]
    unique: str
    # kafka-python's admin client is not safe for concurrent use by the scenario threads.
    admin_lock: threading.Lock = field(default_factory=threading.Lock)

    def topics(self, prefix: str, count: int, partitions: int) -> tuple[list[str], list[tuple[str, int]]]:
        names = [f"{prefix}-{self.unique}-t{i}" for i in range(count)]
        with self.admin_lock:
            for name in names:
                self.admin.create_topic(name, partitions)
        return names, [(t, p) for t in names for p in range(partitions)]

    def add_partitions(self, topic: str, total: int) -> None:
        with self.admin_lock:
            self.admin.add_partitions(topic, total)

    def member(self, group: str, topics: list[str], client_id: str, **kwargs: object) -> Member:
        kwargs.setdefault("session_timeout_ms", SESSION_MS)
        member = Member(self.bootstrap, group, topics, client_id, **kwargs)
        self.members.append(member)
        return member

    def events(self, group: str, after_generation: int | None = None) -> list[RebalanceEvent]:
        return [e for e in self.monitor.event_log.read(group)
                if after_generation is None or e.new_generation > after_generation]

    def wait_events(self, group: str, after_generation: int, what: str, count: int = 1) -> list[RebalanceEvent]:
        wait_until(lambda: len(self.events(group, after_generation)) >= count, 90, what, interval=1.0)
        return self.events(group, after_generation)


@pytest.fixture
def env(kafka_broker, admin, monitor, members, unique) -> Env:
    return Env(kafka_broker.bootstrap, admin, monitor, members, unique)


def _counter(samples: Samples, name: str, group: str, **labels: str) -> float:
    """A group's counter; 0 when the series is absent (a label value never seen yet)."""
    return value(samples, name, group=group, **labels) or 0


def _shut_down(members: list[Member]) -> None:
    """Stop the whole application: first every poll loop, then every consumer closes.

    A member still inside poll() when another one leaves rejoins there and then, completing a
    generation of its own before it closes (a real extra rebalance). Stopping all poll loops
    first, as an orderly shutdown does, makes the group go straight to Empty.
    """
    for member in members:
        member.stop_polling()
    wait_until(lambda: all(m.stalled for m in members), 30, "every poll loop to stop")
    leave_all(members)


def _run_at_once(scenarios: dict[str, Callable[[], None]]) -> None:
    """Run the scenarios on threads; fail with every scenario's error, not just the first."""
    with ThreadPoolExecutor(len(scenarios)) as pool:
        futures = {name: pool.submit(fn) for name, fn in scenarios.items()}
    failures = {name: f.exception() for name, f in futures.items() if f.exception() is not None}
    if failures:
        report = "\n".join(f"--- {name}: {''.join(traceback.format_exception(e))}" for name, e in failures.items())
        raise AssertionError(f"{len(failures)} scenario(s) failed:\n{report}")


# ------------------------------------------------------------------ one group's life, as the definition counts it


def test_create_join_restart_delete_recreate(env: Env) -> None:
    """Create (baseline, 0), join (1), whole-application restart (1 Empty transition + 1 rebalance per
    assignment completed, nothing moved to nobody), delete and re-create (the tombstone removes the group: a
    fresh baseline)."""
    group = f"life-{env.unique}"
    topics, parts = env.topics("life", 1, 4)
    monitor = env.monitor

    # Created: the first assignment is a baseline, on 3.9 and on 4.x (whose generation-0 record has no members).
    [a0] = start_members([env.member(group, topics, "app-0")])
    samples = wait_generation(monitor, group, a0, "the new group's baseline", members=1)
    for name in ("rebalances_total", "empty_transitions_total", "recreations_total", "partitions_moved_total"):
        assert _counter(samples, f"kafka_consumergroup_{name}", group) == 0, name
    assert env.events(group) == []

    # A member joins: one rebalance, caused by the join; its sync phase is measured.
    [a1] = start_members([env.member(group, topics, "app-1")])
    wait_balanced([a0, a1], parts)
    joined_generation = a0.generation
    samples = wait_generation(monitor, group, a0, "the join", members=2)
    assert _counter(samples, "kafka_consumergroup_rebalances_total", group) == 1
    [join] = env.events(group)
    assert join.causes == ("members_joined",) and join.members_joined == (a1.member_id,)
    assert _counter(samples, "kafka_consumergroup_rebalance_causes_total", group, cause="members_joined") == 1
    assert _counter(samples, "kafka_consumergroup_rebalance_duration_seconds_count", group) == 1
    assert join.duration_ms is not None and join.duration_ms >= 0
    moved = _counter(samples, "kafka_consumergroup_partitions_moved_total", group)

    # The whole application restarts: every member leaves (Kafka writes an Empty generation) ...
    _shut_down([a0, a1])
    samples = wait_for(monitor, lambda s: _counter(s, "kafka_consumergroup_empty_transitions_total", group) == 1,
                       "the Empty transition")
    assert value(samples, "kafka_consumergroup_state", group=group, state="Empty") == 1
    assert value(samples, "kafka_consumergroup_current_members", group=group) == 0
    assert _counter(samples, "kafka_consumergroup_rebalances_total", group) == 1
    assert _counter(samples, "kafka_consumergroup_member_departures_total", group, how="left_cleanly") == 2
    assert len(env.events(group)) == 1
    # ... and comes back. Both instances start, connect, and join together; the leader's slow assignment
    # keeps the sync phase open for the other's JoinGroup, so both land in one completed assignment, as
    # group.initial.rebalance.delay.ms arranges on a production broker (the test broker sets it to 0).
    # kafka-python assigns on its network loop, no heartbeat goes out meanwhile: a session to spare.
    back = [env.member(group, topics, f"app-{i}", hold=True, assign_delay_ms=8000, session_timeout_ms=30000)
            for i in range(2)]
    for member in back:
        member.start()
    wait_until(lambda: all(m.ready for m in back), 60, "the application's instances to connect")
    for member in back:
        member.release()
    wait_balanced(back, parts)
    assert back[0].generation == back[1].generation > joined_generation
    samples = wait_generation(monitor, group, back[0], "the application's return", members=2)
    # Each assignment a client completed after the restart is one rebalance, never more, never fewer. Almost
    # always that is one, which both received; a CI run once saw Kafka complete another (a second JoinGroup
    # late on a loaded machine, or a client's rejoin), so the count follows what the clients lived through.
    completed = sorted({g for m in back for g in m.generations})
    print(f"completed after the restart: {[(m.client_id, m.generations) for m in back]}")
    assert completed[-1] == back[0].generation
    assert _counter(samples, "kafka_consumergroup_rebalances_total", group) == 1 + len(completed)
    assert _counter(samples, "kafka_consumergroup_empty_transitions_total", group) == 1
    restart = env.events(group, joined_generation)
    assert [e.new_generation for e in restart] == completed
    assert restart[0].causes == ("members_joined",) and all(e.members_left == () for e in restart)
    assert sorted(m for e in restart for m in e.members_joined) == sorted(m.member_id for m in back)
    if len(completed) == 1:  # one assignment out of Empty: nothing moved, as nobody held anything
        assert restart[0].moved_partitions == ()
        assert _counter(samples, "kafka_consumergroup_partitions_moved_total", group) == moved

    # Deleted once empty: the tombstones remove the group, its series leave /metrics, its history stays.
    _shut_down(back)
    wait_for(monitor, lambda s: _counter(s, "kafka_consumergroup_empty_transitions_total", group) == 2,
             "the second Empty transition")
    assert env.admin.client.delete_groups([group]) == {group: "OK"}
    wait_for(monitor, lambda s: not series(s, "kafka_consumergroup_rebalances_total", group=group),
             "the deleted group's series to go")
    assert len(env.events(group)) == 1 + len(completed)

    # Re-created under the same name: a new group, a new baseline, no rebalance.
    [fresh] = start_members([env.member(group, topics, "app-0")])
    samples = wait_generation(monitor, group, fresh, "the re-created group's baseline", members=1)
    for name in ("rebalances_total", "empty_transitions_total", "recreations_total", "partitions_moved_total"):
        assert _counter(samples, f"kafka_consumergroup_{name}", group) == 0, name
    assert len(env.events(group)) == 1 + len(completed)


# ------------------------------------------------------------------ every cause and every departure, for real


def test_each_cause_and_departure(env: Env, kip848_clients_supported: bool) -> None:
    """One group per cause or departure class, all at once; each event and counter names exactly what happened.

    Leader changes are produced the only way Kafka's classic coordinator makes them: the leader leaves
    (a new leader is elected only among the members that rejoined). Protocol conversion needs a KIP-848
    client the broker speaks to (Kafka 4.x; Kafka 3.9 offers ConsumerGroupHeartbeat v0 only).
    """
    monitor = env.monitor

    def check_counters(group: str, causes: dict[str, int], departures: dict[str, int]) -> None:
        samples = wait_for(monitor, lambda s: _counter(s, "kafka_consumergroup_rebalances_total", group)
                           == len(env.events(group)), f"{group}'s counters")
        for cause, count in causes.items():
            assert _counter(samples, "kafka_consumergroup_rebalance_causes_total", group, cause=cause) == count, cause
        for how, count in departures.items():
            assert _counter(samples, "kafka_consumergroup_member_departures_total", group, how=how) == count, how

    def leader_leaves_cleanly() -> None:
        """Range on t0, t1 x 3 with 2 members (4/2, the advisor's example); then the leader closes."""
        group = f"clean-{env.unique}"
        topics, parts = env.topics("clean", 2, 3)
        crew = start_members([env.member(group, topics, f"C{i}") for i in range(2)])
        wait_balanced(crew, parts)
        samples = wait_generation(monitor, group, crew[0], "the clean group", members=2)
        assert value(samples, "kafka_consumergroup_info", group=group, leader=crew[0].member_id) == 1
        # The pass may still show its result for the one-member generation (1.0 everywhere) for a period.
        ratio = "kafka_consumergroup_assignor_imbalance_ratio"
        samples = wait_for(monitor, lambda s: value(s, ratio, group=group, assignor="range") == pytest.approx(4 / 3),
                           "the advisor pass's result for the two-member generation")
        assert len(series(samples, ratio, group=group)) == 4
        assert value(samples, ratio, group=group, assignor="roundrobin") == 1.0
        generation = crew[0].generation
        crew[0].leave()
        wait_balanced(crew[1:], parts)
        wait_generation(monitor, group, crew[1], "the leader's departure", members=1)
        [e] = env.events(group, generation)
        assert e.causes == ("leader_changed", "members_left") and e.leader_changed
        assert e.members_left == (crew[0].member_id,) and e.departures == ("left_cleanly",)
        assert e.leader == crew[1].member_id
        check_counters(group, {"members_joined": 1, "members_left": 1, "leader_changed": 1},
                       {"left_cleanly": 1, "session_timeout": 0, "poll_timeout": 0})

    def member_crashes() -> None:
        group = f"crash-{env.unique}"
        topics, parts = env.topics("crash", 1, 4)
        crew = start_members([env.member(group, topics, f"K{i}") for i in range(2)])
        wait_balanced(crew, parts)
        wait_generation(monitor, group, crew[0], "the crash group", members=2)
        generation = crew[0].generation
        crew[1].crash()  # SIGKILL: no LeaveGroup, the 6 s session timeout removes it
        wait_balanced(crew[:1], parts, timeout=60)
        wait_generation(monitor, group, crew[0], "the crashed member's removal", members=1)
        [e] = env.events(group, generation)
        assert e.causes == ("members_left",) and e.departures == ("session_timeout",)
        check_counters(group, {"members_left": 1, "leader_changed": 0}, {"session_timeout": 1, "left_cleanly": 0})

    def member_stops_polling() -> None:
        group = f"stuck-{env.unique}"
        topics, parts = env.topics("stuck", 1, 4)
        crew = start_members([env.member(group, topics, "P0"),
                              env.member(group, topics, "P1", max_poll_interval_ms=POLL_INTERVAL_MS)])
        wait_balanced(crew, parts)
        wait_generation(monitor, group, crew[0], "the stuck group", members=2)
        generation = crew[0].generation
        crew[1].stop_polling()  # heartbeats go on; after 8 s without poll the client leaves the group
        wait_balanced(crew[:1], parts, timeout=60)
        wait_generation(monitor, group, crew[0], "the stuck member's removal", members=1)
        [e] = env.events(group, generation)
        assert e.causes == ("members_left",) and e.departures == ("poll_timeout",)
        assert crew[1].running  # it did not crash: its heartbeat thread took it out
        check_counters(group, {"members_left": 1}, {"poll_timeout": 1, "session_timeout": 0, "left_cleanly": 0})

    def subscription_changes() -> None:
        group = f"subs-{env.unique}"
        (first, second), parts = env.topics("subs", 2, 2)
        [s0] = start_members([env.member(group, [first], "S0", more_topics=[second])])
        wait_balanced([s0], [tp for tp in parts if tp[0] == first])
        wait_generation(monitor, group, s0, "the subscription group", members=1)
        generation = s0.generation
        s0.subscribe_more()
        wait_balanced([s0], parts)
        wait_generation(monitor, group, s0, "the new subscription's assignment", members=1)
        [e] = env.events(group, generation)
        assert e.causes == ("subscription_changed",) and e.moved_partitions == ()
        check_counters(group, {"subscription_changed": 1, "members_joined": 0, "partitions_added": 0}, {})

    def partitions_added() -> None:
        group = f"grow-{env.unique}"
        [topic], parts = env.topics("grow", 1, 2)
        [g0] = start_members([env.member(group, [topic], "G0")])
        wait_balanced([g0], parts)
        wait_generation(monitor, group, g0, "the growing group", members=1)
        generation = g0.generation
        env.add_partitions(topic, 4)
        wait_balanced([g0], [(topic, p) for p in range(4)])
        wait_generation(monitor, group, g0, "the new partitions' assignment", members=1)
        [e] = env.events(group, generation)
        assert e.causes == ("partitions_added",) and e.moved_partitions == ()
        check_counters(group, {"partitions_added": 1, "subscription_changed": 0}, {})

    def static_member_switches_assignor() -> None:
        """A static member restarted with roundrobin preferred (range still supported, as a rolling change
        requires): Kafka rebalances because the group's protocol changes, keeping the member's place."""
        group = f"switch-{env.unique}"
        topics, parts = env.topics("switch", 1, 4)
        instance = f"switch-{env.unique}-i0"
        [x] = start_members([env.member(group, topics, "X", instance_id=instance, session_timeout_ms=20000)])
        wait_balanced([x], parts)
        wait_generation(monitor, group, x, "the static group", members=1)
        generation, old_id = x.generation, x.member_id
        x.crash()  # well inside its 20 s session: the same instance id comes back with other assignors
        [x2] = start_members([env.member(group, topics, "X", instance_id=instance, session_timeout_ms=20000,
                                         assignor="roundrobin,range")])
        wait_until(lambda: x2.generation is not None and x2.generation > generation, 60, "the protocol change")
        wait_balanced([x2], parts)
        samples = wait_generation(monitor, group, x2, "the switched assignor", members=1)
        assert value(samples, "kafka_consumergroup_info", group=group, protocol="roundrobin") == 1
        events = env.events(group, generation)
        assert len(events) == 1, events
        [e] = events
        assert e.causes == ("assignor_changed", "static_member_replaced") and not e.leader_changed
        assert x2.member_id != old_id and e.members_joined == e.members_left == ()
        check_counters(group, {"assignor_changed": 1, "static_member_replaced": 1, "members_joined": 0}, {})

    def classic_group_converted() -> None:
        """A KIP-848 member joins a classic group (4.x's migration policy converts it online)."""
        group = f"convert-{env.unique}"
        topics, parts = env.topics("convert", 1, 4)
        [c0] = start_members([env.member(group, topics, "C0")])
        wait_balanced([c0], parts)
        wait_generation(monitor, group, c0, "the classic group", members=1)
        generation = c0.generation
        [k0] = start_members([env.member(group, topics, "K0", protocol="consumer")])

        def split() -> bool:  # the classic member reports generations, the KIP-848 one does not
            return bool(c0.assignment and k0.assignment) and sorted(c0.assignment | k0.assignment) == parts
        wait_until(split, 90, "the converted group to share the partitions")
        wait_for(monitor, lambda s: value(s, "kafka_consumergroup_info", group=group, group_type="consumer") == 1
                 and value(s, "kafka_consumergroup_current_members", group=group) == 2, "the converted group")
        events = env.wait_events(group, generation, "the conversion's rebalance")
        assert events[0].causes == ("members_joined", "protocol_converted"), events
        assert events[0].group_type == "consumer" and events[0].members_left == ()
        # KIP-848's measurable part: from the group epoch bump (the join) to the target assignment.
        assert events[0].duration_ms is not None and events[0].duration_ms >= 0
        check_counters(group, {"protocol_converted": 1, "members_joined": 1}, {})
        assert _counter(scrape(monitor), "kafka_consumergroup_rebalance_duration_seconds_count", group) == sum(
            1 for e in env.events(group) if e.duration_ms is not None) >= 1

    scenarios = [leader_leaves_cleanly, member_crashes, member_stops_polling, subscription_changes, partitions_added,
                 static_member_switches_assignor]
    if kip848_clients_supported:
        scenarios.append(classic_group_converted)
    _run_at_once({f.__name__: f for f in scenarios})


# ------------------------------------------------------------------ the offline switch of group.protocol


def test_offline_protocol_switch_is_one_conversion_both_ways(env: Env, kip848: None) -> None:
    """Kafka's documented offline migration, both ways: every consumer stops, group.protocol changes, they
    start again. Kafka deletes the empty group and creates the other protocol's in the same write; the job
    counts one ``protocol_converted`` rebalance each way and no re-creation. A real deletion
    (kafka-consumer-groups --delete) followed by members of the other protocol is no conversion."""
    group = f"offline-{env.unique}"
    topics, parts = env.topics("offline", 1, 4)
    monitor = env.monitor

    def converted(group_type: str, rebalances: int, empties: int) -> list[RebalanceEvent]:
        samples = wait_for(monitor, lambda s: value(s, "kafka_consumergroup_info", group=group,
                                                    group_type=group_type) == 1
                           and _counter(s, "kafka_consumergroup_rebalances_total", group) == rebalances,
                           f"the {group_type} group's first assignment")
        assert _counter(samples, "kafka_consumergroup_recreations_total", group) == 0
        assert _counter(samples, "kafka_consumergroup_empty_transitions_total", group) == empties
        assert _counter(samples, "kafka_consumergroup_rebalance_causes_total", group,
                        cause="protocol_converted") == rebalances
        return env.events(group)

    def stopped(empties: int) -> None:
        wait_for(monitor, lambda s: _counter(s, "kafka_consumergroup_empty_transitions_total", group) == empties
                 and value(s, "kafka_consumergroup_current_members", group=group) == 0, "the group to go Empty")

    [c0] = start_members([env.member(group, topics, "C0")])
    wait_balanced([c0], parts)
    wait_generation(monitor, group, c0, "the classic group's baseline", members=1)
    c0.leave()
    stopped(1)
    # Upgrade: the application starts again with group.protocol=consumer.
    [k0] = start_members([env.member(group, topics, "K0", protocol="consumer")])
    wait_balanced([k0], parts)
    [upgrade] = converted("consumer", 1, 1)
    assert upgrade.causes == ("members_joined", "protocol_converted") and upgrade.group_type == "consumer"
    assert upgrade.joined_clients[0].startswith("K0@")
    k0.leave()
    stopped(2)
    # Downgrade: back to group.protocol=classic.
    [c1] = start_members([env.member(group, topics, "C1")])
    wait_balanced([c1], parts)
    events = converted("classic", 2, 2)
    assert [e.causes for e in events] == [("members_joined", "protocol_converted")] * 2
    assert events[1].group_type == "classic" and events[1].joined_clients[0].startswith("C1@")

    # A real deletion, then members of the other protocol: a new group, no conversion, no rebalance.
    c1.leave()
    stopped(3)
    with env.admin_lock:
        assert env.admin.client.delete_groups([group]) == {group: "OK"}
    wait_for(monitor, lambda s: not series(s, "kafka_consumergroup_rebalances_total", group=group),
             "the deleted group's series to go")
    [k1] = start_members([env.member(group, topics, "K1", protocol="consumer")])
    wait_balanced([k1], parts)
    samples = wait_for(monitor, lambda s: value(s, "kafka_consumergroup_info", group=group, group_type="consumer") == 1
                       and value(s, "kafka_consumergroup_current_members", group=group) == 1, "the new group")
    for name in ("rebalances_total", "recreations_total", "empty_transitions_total"):
        assert _counter(samples, f"kafka_consumergroup_{name}", group) == 0, name
    assert len(env.events(group)) == 2  # its history stays, nothing added
