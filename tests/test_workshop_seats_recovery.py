"""One bad lab, one seat (docs/workshop-stack.md), on the expanded template for 3 and 40 seats and
decided from the resource schemas as tests/test_workshop_update.py decides updates: a seat listed in
ReplaceSeats with a new generation has its instance replaced and nothing else; SpareSeats adds
seats after the learners' without touching theirs; a failed lab reports into its own seat's
LabNNStatus output; the documented restart names the unit that runs JupyterLab."""
from __future__ import annotations

import re

import pytest

from tests.test_workshop_access import CACHE, expand, seats
from tests.test_workshop_update import class_of, named_replacements, replaced_by_update, updated


def with_replaced(count: int, listed: list[str]):
    return expand(count, ClassroomCacheUrl=CACHE, ReplaceSeats=listed)


@pytest.mark.parametrize("count", [3, 40])
def test_a_new_generation_replaces_that_seats_instance_only(count):
    before = class_of(count)
    last = seats(before)[-1]
    once = with_replaced(count, [f"{last}-1"])
    assert updated(before, once) == {f"Lab{last}"}
    assert replaced_by_update(before, once) == {f"Lab{last}": ["/properties/NetworkInterfaces"]}
    assert named_replacements(before, once) == []
    # Listing another seat replaces that one only; a seat listed again unchanged, nothing; its
    # next generation, itself again.
    twice = with_replaced(count, [f"{last}-1", "02-1"])
    assert set(replaced_by_update(once, twice)) == {"Lab02"}
    assert replaced_by_update(twice, with_replaced(count, [f"{last}-1", "02-1"])) == {}
    assert set(replaced_by_update(twice, with_replaced(count, [f"{last}-2", "02-1"]))) == {f"Lab{last}"}


def test_a_seat_number_inside_another_replaces_neither():
    """Seat 12's generation is not seat 02's, nor 22's (the list is matched item by item)."""
    before = class_of(40)
    after = with_replaced(40, ["12-1"])
    assert set(replaced_by_update(before, after)) == {"Lab12"}
    description = after.resources["Lab02"]["Properties"]["NetworkInterfaces"][0]["Description"]
    assert description == "workshop lab 02, generation 0"
    assert after.resources["Lab12"]["Properties"]["NetworkInterfaces"][0]["Description"] == \
        "workshop lab 12, generation 1"


@pytest.mark.parametrize("count,spares", [(3, 2), (36, 4)])
def test_spare_seats_follow_the_learners_and_touch_none_of_theirs(count, spares):
    before = expand(count, ClassroomCacheUrl=CACHE)
    after = expand(count, ClassroomCacheUrl=CACHE, SpareSeats=str(spares))
    assert seats(after) == [f"{n:02d}" for n in range(1, count + spares + 1)]
    assert updated(before, after) == set() and replaced_by_update(before, after) == {}
    assert set(before.resources) < set(after.resources)
    assert len(after.outputs) <= 200  # the stack's outputs quota


def test_more_than_40_seats_is_refused():
    with pytest.raises(KeyError, match="SeatCount"):
        expand(38, SpareSeats="3")


@pytest.mark.parametrize("count", [3, 40])
def test_each_seat_reports_its_own_first_boot(count):
    """LabNNStatus is the data lab NN's own wait condition received (ready or FAILED: why)."""
    stack = class_of(count)
    for seat in seats(stack):
        assert stack.outputs[f"Lab{seat}Status"] == stack.get_att(f"Lab{seat}Ready", "Data")
    assert len({stack.outputs[f"Lab{s}Status"] for s in seats(stack)}) == count


def test_the_documented_restart_names_the_service_the_lab_runs():
    """The page's one command restarts the unit bootstrap.sh writes for JupyterLab, through
    AWS-RunShellScript, on the instance it names."""
    from tests.paths import REPO_ROOT

    page = (REPO_ROOT / "docs" / "workshop-stack.md").read_text()
    section = page.split("## One bad lab, one seat\n", 1)[1].split("\n## ", 1)[0]
    (service,) = re.findall(r"systemctl restart ([\w-]+)", section)
    assert "--document-name AWS-RunShellScript" in section and "aws ssm send-command" in section
    bootstrap = (REPO_ROOT / "deploy" / "bootstrap.sh").read_text()
    assert f'"$LAB_SYSTEMD_DIR/{service}.service"' in bootstrap
    unit = bootstrap.split(f'cat > "$LAB_SYSTEMD_DIR/{service}.service"', 1)[1].split("\nEOF", 1)[0]
    assert re.search(r"^ExecStart=\$make --no-print-directory lab ", unit, re.M), unit
