"""The soak's count of what the job's objects hold (benchmarks/held.py): a leak must show by path."""

from benchmarks.held import changes, held
from streaming.groups.stage import GroupStage


class Holder:
    """Not one of the project's objects: the walk does not enter it."""

    def __init__(self) -> None:
        self.entries = {"a": 1}


def test_a_container_that_grows_is_reported_by_its_path_with_every_sample_and_one_back_where_it_was_is_not() -> None:
    stage = GroupStage()
    stage.members_dropped["g1"] = 1
    before = held(stage, "stage")
    stage.members_dropped["g2"] = 2
    stage._abandon_at["g1"] = 5
    middle = held(stage, "stage")
    stage._abandon_at.clear()
    stage.members_dropped["g3"] = 3
    assert changes([before, middle, held(stage, "stage")]) == [("stage.members_dropped", [1, 2, 3])]


def test_containers_inside_containers_add_up_under_one_path_and_foreign_objects_are_not_entered() -> None:
    stage = GroupStage()
    stage._learnt = {"g1": {"t1": "a", "t2": "b"}, "g2": {"t3": "c"}}
    stage.facts = Holder()  # type: ignore[assignment]
    shared = GroupStage()
    shared.members_dropped["x"] = 1
    stage._whole = {"g1": shared, "g2": shared}  # type: ignore[dict-item]
    sizes = held(stage, "stage")
    assert sizes["stage._learnt"] == 2
    assert sizes["stage._learnt[*]"] == 3
    assert not any(path.startswith("stage.facts") for path in sizes)
    # One of the project's objects reached twice is walked, and counted, once.
    assert sizes["stage._whole[*].members_dropped"] == 1
