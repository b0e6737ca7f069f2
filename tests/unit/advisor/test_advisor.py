"""The assignor advisor: the seeds' worked examples, checked against kafka-python's own assignors."""

from __future__ import annotations

import dataclasses
import io
import re

import pytest
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from decoders.records import Record, Struct
from streaming.advisor.assignors import (
    ASSIGNORS,
    AdvisorMember,
    Outcome,
    _Cluster,
    _round_robin,
    advise,
    members_of,
    simulate,
)
from streaming.advisor.background import AdvisorPass
from streaming.advisor.command import advice_table, advise_command, recommend
from streaming.groups.fold import apply_record
from streaming.groups.model import GroupSnapshot
from streaming.groups.summary import summarize
from testbed.workload import wait_until
from tests.support.group_records import parts

T0 = 1_700_000_000_000


def group(members: dict[str, tuple[tuple[str, ...], str]], protocol: str = "range", generation: int = 3,
          protocol_type: str = "consumer") -> GroupSnapshot:
    """A classic group snapshot from one type 2 record: member id → (subscription, owned spec)."""
    value = Struct(
        protocolType=protocol_type, generation=generation, protocol=protocol, leader=next(iter(members)),
        currentStateTimestamp=T0,
        members=tuple(
            Struct(memberId=m, groupInstanceId=None, clientId=m, clientHost="/h", rebalanceTimeout=300000,
                   sessionTimeout=45000, subscription=b"", assignment=b"",
                   decodedSubscription=Struct(topics=topics),
                   decodedAssignment=Struct(assignedPartitions=tuple(
                       Struct(topic=t, partitions=tuple(p)) for t, p in parts(spec).items())))
            for m, (topics, spec) in members.items()
        ),
    )
    snapshot, _ = apply_record(None, Record(2, Struct(group="g"), 3, value), T0)
    return snapshot


T01 = ("t0", "t1")
SEED_TOPICS = ("t0", "t1", "t2", "t3")


# ------------------------------------------------------------------ the seeds' worked examples


def test_range_on_two_topics_of_three_partitions_gives_four_and_two():
    snap = group({"C0": (T01, "t0p0 t0p2 t1p1"), "C1": (T01, "t0p1 t1p0 t1p2")}, protocol="roundrobin")
    assert simulate("range", members_of(snap), {"t0": 3, "t1": 3}) == {
        "C0": parts("t0p0 t0p1 t1p0 t1p1"), "C1": parts("t0p2 t1p2")}
    outcomes = advise(snap)
    assert outcomes["range"].imbalance_ratio == pytest.approx(4 / 3)
    assert outcomes["roundrobin"] == Outcome(1.0, 0)  # what the group runs: nothing would move


def test_roundrobin_on_the_same_group_gives_three_and_three():
    snap = group({"C0": (T01, "t0p0 t0p1 t1p0 t1p1"), "C1": (T01, "t0p2 t1p2")})
    assert simulate("roundrobin", members_of(snap), {"t0": 3, "t1": 3}) == {
        "C0": parts("t0p0 t0p2 t1p1"), "C1": parts("t0p1 t1p0 t1p2")}
    outcomes = advise(snap)
    assert outcomes["range"] == Outcome(pytest.approx(4 / 3), 0)
    assert outcomes["roundrobin"].imbalance_ratio == 1.0


def test_sticky_keeps_all_but_the_leavers_partitions():
    # C0, C1, C2 on t0..t3 x 2 had C0: t0p0 t1p1 t3p0, C1: t0p1 t2p0 t3p1, C2: t1p0 t2p1; C1 left.
    remaining = [AdvisorMember("C0", None, SEED_TOPICS, parts("t0p0 t1p1 t3p0")),
                 AdvisorMember("C2", None, SEED_TOPICS, parts("t1p0 t2p1"))]
    counts = dict.fromkeys(SEED_TOPICS, 2)
    sticky = simulate("sticky", remaining, counts, generation=7)
    assert sticky == {"C0": parts("t0p0 t1p1 t3p0 t2p0"), "C2": parts("t1p0 t2p1 t0p1 t3p1")}
    assert simulate("cooperative-sticky", remaining, counts, generation=7) == sticky
    assert simulate("roundrobin", remaining, counts) == {
        "C0": parts("t0p0 t1p0 t2p0 t3p0"), "C2": parts("t0p1 t1p1 t2p1 t3p1")}
    snap = group({"C0": (SEED_TOPICS, "t0p0 t1p1 t3p0"), "C2": (SEED_TOPICS, "t1p0 t2p1")}, protocol="sticky")
    outcomes = advise(snap, {t: 2 for t in SEED_TOPICS})
    assert outcomes["sticky"] == Outcome(1.0, 0)  # only the leaver's, unowned, partitions placed
    assert outcomes["roundrobin"] == Outcome(1.0, 2)  # t1p0 and t1p1 swap owners


def test_different_subscriptions():
    # C0 ⊂ t0; C1 ⊂ t0, t1; C2 ⊂ t0, t1, t2 with 1, 2, 3 partitions.
    snap = group({"C0": (("t0",), "t0p0"), "C1": (("t0", "t1"), "t1p0"),
                  "C2": (("t0", "t1", "t2"), "t1p1 t2p0 t2p1 t2p2")}, protocol="roundrobin")
    members, counts = members_of(snap), {"t0": 1, "t1": 2, "t2": 3}
    assert simulate("roundrobin", members, counts) == {
        "C0": parts("t0p0"), "C1": parts("t1p0"), "C2": parts("t1p1 t2p0 t2p1 t2p2")}
    assert simulate("sticky", members, counts) == {
        "C0": parts("t0p0"), "C1": parts("t1p0 t1p1"), "C2": parts("t2p0 t2p1 t2p2")}
    outcomes = advise(snap)
    assert outcomes["roundrobin"] == Outcome(2.0, 0) and outcomes["sticky"] == Outcome(1.5, 1)
    assert recommend("roundrobin", outcomes) == "cooperative-sticky"


# ------------------------------------------------------------------ against kafka-python's own classes


class _Member:
    def __init__(self, member_id: str, instance_id: str | None, topics: tuple[str, ...]) -> None:
        self.member_id, self.group_instance_id = member_id, instance_id
        self.metadata = ConsumerProtocolSubscription(version=0, topics=list(topics), user_data=b"")


def _direct(assignor, members: list[_Member], counts: dict[str, int]) -> dict[str, dict[str, list[int]]]:
    result = assignor.assign(_Cluster(counts), members)
    return {m: {t: sorted(p) for t, p in a.assigned_partitions if p} for m, a in result.items()}


@pytest.mark.parametrize("n_members", [1, 2, 3, 5])
def test_simulations_are_kafka_pythons_and_the_round_robin_walk_agrees(n_members):
    counts = {"t0": 7, "t1": 4, "t2": 1}
    ids = [f"m{i}" for i in range(n_members)]
    members = [AdvisorMember(m, None, tuple(counts), {}) for m in ids]
    direct_members = [_Member(m, None, tuple(counts)) for m in ids]
    assert simulate("range", members, counts) == _direct(RangePartitionAssignor, direct_members, counts)
    expected = _direct(RoundRobinPartitionAssignor, direct_members, counts)
    assert simulate("roundrobin", members, counts) == expected
    assert _round_robin(members, counts) == expected


def test_static_and_dynamic_members_are_all_assigned():
    # Interleaved static/dynamic members make kafka-python's groupby drop members; simulate sorts them.
    members = [AdvisorMember("a", None, ("t0",), {}), AdvisorMember("b", "static-b", ("t0",), {}),
               AdvisorMember("c", None, ("t0",), {})]
    for name in ASSIGNORS:
        result = simulate(name, members, {"t0": 6})
        assert sorted(p for a in result.values() for p in a.get("t0", [])) == list(range(6)), name
        assert sorted(result) == ["a", "b", "c"]
    assert simulate("range", members, {"t0": 6})["b"] == {"t0": [0, 1]}  # static members first


def test_cooperative_sticky_reports_the_final_round():
    members = [AdvisorMember("C0", None, ("t0",), parts("t0p0 t0p1 t0p2 t0p3")), AdvisorMember("C1", None, ("t0",), {})]
    final = simulate("cooperative-sticky", members, {"t0": 4})
    assert sorted(len(a["t0"]) for a in final.values()) == [2, 2]
    assert set(final["C0"]["t0"]) < {0, 1, 2, 3}


# ------------------------------------------------------------------ recommendation, table, command


def test_recommendation_keeps_a_group_that_is_already_balanced():
    snap = group({"C0": (T01, "t0p0 t0p2 t1p1"), "C1": (T01, "t0p1 t1p0 t1p2")}, protocol="roundrobin")
    text = advice_table(snap, advise(snap))
    assert "recommendation: keep roundrobin" in text
    lines = text.splitlines()
    assert lines[0] == "group g: 2 member(s), generation 3"
    assert re.split(r"\s{2,}", lines[2]) == ["current (roundrobin)", "1.00", "0"]
    assert re.split(r"\s{2,}", lines[3]) == ["range", "1.33", "3"]  # t0p1, t1p0 to C0; t0p2 to C1


def test_recommendation_names_the_better_assignor_and_its_cost():
    snap = group({"C0": (T01, "t0p0 t0p1 t1p0 t1p1"), "C1": (T01, "t0p2 t1p2")})
    text = advice_table(snap, advise(snap))
    assert text.splitlines()[-1] == (
        "recommendation: cooperative-sticky (imbalance 1.00 instead of 1.33; switching moves 1 partition(s) once)")


def test_only_classic_consumer_groups_are_advised():
    connect = group({"w1": ((), "")}, protocol="sessioned", protocol_type="connect")
    with pytest.raises(ValueError, match="not a classic consumer group"):
        advise(connect)


def test_advise_command_from_a_snapshot_file_or_a_loader(tmp_path):
    snap = group({"C0": (T01, "t0p0 t0p1 t1p0 t1p1"), "C1": (T01, "t0p2 t1p2")})
    path = tmp_path / "g.json"
    path.write_text(snap.to_json())
    out = io.StringIO()
    assert advise_command(["--group", "g", "--snapshot", str(path)], out=out) == 0
    assert out.getvalue().startswith("group g: 2 member(s)")
    seen = []

    def load(checkpoint_dir, group_id):
        seen.append((checkpoint_dir.name, group_id))
        return GroupSnapshot.from_json(snap.to_json()) if group_id == "g" else None

    out = io.StringIO()
    assert advise_command(["--group", "g", "--checkpoint-dir", str(tmp_path / "cp"), "--partitions", "t0=4"],
                          load=load, out=out) == 0
    assert seen == [("cp", "g")]
    # t0 has a fourth partition nobody holds yet: range gives it to C1 (4 and 3), moving nothing.
    assert re.split(r"\s{2,}", out.getvalue().splitlines()[3]) == ["range", "1.14", "0"]
    out = io.StringIO()
    assert advise_command(["--group", "other"], load=load, out=out) == 1
    assert "not found" in out.getvalue()
    with pytest.raises(SystemExit):
        advise_command(["--group", "g"], out=io.StringIO())  # no snapshot, no loader


# ------------------------------------------------------------------ the background pass (advisor_pass)


def _offer_args(snap: GroupSnapshot, name: str = "g"):
    """What the exporter hands the pass: the group's summary and owner → (topic, partition) pairs."""
    summary = dataclasses.replace(summarize(snap, T0), group=name)
    assert snap.classic is not None
    owned = {m.owner: [(t, p) for t, ps in sorted(m.assigned.items()) for p in ps] for m in snap.classic.members}
    return summary, owned


RANGE_4_2 = {"C0": (T01, "t0p0 t0p1 t1p0 t1p1"), "C1": (T01, "t0p2 t1p2")}


class _Published(dict):
    def __call__(self, group: str, ratios) -> None:
        self[group] = ratios


def test_pass_publishes_every_assignor_for_the_range_example():
    published = _Published()
    advisor = AdvisorPass(published)
    advisor.offer(*_offer_args(group(RANGE_4_2)))
    assert published == {} and advisor.pending() == 1  # nothing is evaluated on the offering thread
    assert advisor.run_pass() == 1
    assert published["g"]["range"] == pytest.approx(4 / 3)
    assert published["g"]["roundrobin"] == published["g"]["sticky"] == published["g"]["cooperative-sticky"] == 1.0


def test_pass_re_evaluates_only_groups_whose_assignment_changed():
    calls: list[str] = []

    def evaluate(members, generation):
        calls.append(",".join(sorted(m.member_id for m in members)))
        return {"range": Outcome(1.0, 0)}

    advisor = AdvisorPass(_Published(), evaluate=evaluate)
    advisor.offer(*_offer_args(group(RANGE_4_2, generation=3)))
    advisor.run_pass()
    advisor.offer(*_offer_args(group(RANGE_4_2, generation=4)))  # new generation, same members and partitions
    assert advisor.pending() == 0
    advisor.offer(*_offer_args(group({"C0": (T01, "t0p0 t0p2 t1p1"), "C1": (T01, "t0p1 t1p0 t1p2")})))
    advisor.offer(*_offer_args(group({"C0": (T01, "t0p0 t0p1 t0p2 t1p0 t1p1 t1p2")})))  # replaces the queued one
    assert advisor.run_pass() == 1 and calls == ["C0,C1", "C0"]


def test_pass_stays_within_its_budget_oldest_offer_first():
    now = [0.0]
    order: list[int] = []

    def evaluate(members, generation):
        now[0] += 0.6  # a large group's cost
        order.append(generation)
        return {"range": Outcome(1.0, 0)}

    published = _Published()
    advisor = AdvisorPass(published, budget_s=1.0, evaluate=evaluate, clock=lambda: now[0])
    for i in range(3):
        advisor.offer(*_offer_args(group(RANGE_4_2, generation=i + 1), name=f"g{i}"))
    assert advisor.run_pass() == 2 and order == [1, 2] and set(published) == {"g0", "g1"}
    assert advisor.run_pass() == 1 and order == [1, 2, 3]
    assert advisor.run_pass() == 0


def test_pass_withdraws_advice_for_groups_it_cannot_advise():
    published = _Published()
    advisor = AdvisorPass(published)
    advisor.offer(*_offer_args(group(RANGE_4_2)))
    advisor.run_pass()
    emptied = dataclasses.replace(summarize(group(RANGE_4_2), T0), members=())
    advisor.offer(emptied, {})
    advisor.run_pass()
    assert published["g"] is None
    unassigned = group({"C0": (T01, ""), "C1": (T01, "")})  # nothing to spread, no partition count to read
    advisor.offer(*_offer_args(unassigned, name="unassigned"))
    connect = group(RANGE_4_2, protocol_type="connect")
    advisor.offer(*_offer_args(connect, name="never-advised"))
    assert advisor.pending() == 0  # nothing was published for them: nothing to withdraw


def test_pass_drops_results_superseded_or_forgotten_while_evaluated():
    published = _Published()
    advisor = AdvisorPass(published, evaluate=lambda members, generation: _during(members))
    changed = _offer_args(group({"C0": (T01, "t0p0 t0p1 t0p2 t1p0 t1p1 t1p2")}))

    def _during(members):
        if len(members) == 2:
            advisor.offer(*changed)  # the batch thread offers a newer assignment meanwhile
        return {"range": Outcome(float(len(members)), 0)}

    advisor.offer(*_offer_args(group(RANGE_4_2)))
    advisor.run_pass()
    assert published == {"g": {"range": 1.0}}  # only the newer input's result (one member)

    published.clear()
    forgetting = AdvisorPass(published, evaluate=lambda members, generation: forgetting.forget("g") or {})
    forgetting.offer(*_offer_args(group(RANGE_4_2)))
    forgetting.run_pass()
    assert published == {} and forgetting.pending() == 0


def test_pass_survives_an_assignor_failure():
    def evaluate(members, generation):
        raise KeyError("odd input")

    published = _Published()
    advisor = AdvisorPass(published, evaluate=evaluate)
    advisor.offer(*_offer_args(group(RANGE_4_2)))
    assert advisor.run_pass() == 1 and published == {"g": None}


def test_pass_runs_on_its_own_thread():
    published = _Published()
    advisor = AdvisorPass(published, period_s=0.05)
    advisor.start()
    try:
        advisor.offer(*_offer_args(group(RANGE_4_2)))
        wait_until(lambda: "g" in published, 30, "the background pass")
    finally:
        advisor.stop()
    assert published["g"]["range"] == pytest.approx(4 / 3)
