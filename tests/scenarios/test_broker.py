"""The foundation: a real broker, a real range group, and its raw records in __consumer_offsets."""

from __future__ import annotations

import struct

from testbed.workload import Admin, Member, start_members, wait_balanced, wait_until


def _key_type_and_group(key: bytes) -> tuple[int, str]:
    """Just enough of the key layout to check the broker side independently of decoders/."""
    record_type, length = struct.unpack_from(">hh", key)
    return record_type, key[4:4 + length].decode()


def test_range_group_records_land_on_the_partition_kafka_computes(kafka_broker, admin: Admin, members, unique):
    from decoders import coordinator_partition

    topic, group = f"orders-{unique}", f"range-{unique}"
    admin.create_topic(topic, 6)
    for partition in range(6):
        admin.produce(topic, 10, partition=partition)
    members.extend(Member(kafka_broker.bootstrap, group, [topic], f"C{i}") for i in range(3))
    start_members(members)
    assignment = wait_balanced(members, [(topic, p) for p in range(6)])
    assert sorted(len(parts) for parts in assignment.values()) == [2, 2, 2]
    # Wait until the auto-committer has committed every partition to the end.
    wait_until(lambda: admin.group_offsets(group) == {(topic, p): 10 for p in range(6)}, 30, "commits")

    records = admin.read_all("__consumer_offsets")
    ours = [(r.partition, *_key_type_and_group(r.key)) for r in records if r.key and len(r.key) > 4]
    ours = [(partition, record_type) for partition, record_type, g in ours if g == group]
    types = {record_type for _, record_type in ours}
    assert {1, 2} <= types
    assert {partition for partition, _ in ours} == {coordinator_partition(group, 50)}
