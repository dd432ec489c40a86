"""deploy/class_cost.py: each line of a class's bill against a hand computation, the totals, the
figures it reads from the template, and the pages that quote it (docs/instructor.md's run-sheet and
cost, the learner's page linked from each seat's outputs)."""
from __future__ import annotations

import copy
import json
import re

import pytest

from deploy import class_cost
from deploy.class_cost import RATES, Stack, bill, total
from deploy.template import LABS_LOOP, load
from tests.paths import REPO_ROOT

# The template's figures as the hand computations below take them: a lab signals within 45 min,
# stops after 60 idle min, 3 interface endpoints, a 512 GB volume; the cache pass 117 min.
STACK = Stack(ready_minutes=45, idle_minutes=60, endpoint_services=3, volume_gb=512)
PASS_MIN = 117
VOLUME_HOUR = 512 * 0.08 / 720  # $ an hour for one lab's volume, a GB-month over 30 days


def items(**kwargs) -> dict[str, float]:
    kwargs = {"seats": 20, "hours": 3, "stack": STACK, "cache_minutes": PASS_MIN} | kwargs
    return {item.what: item.usd for item in bill(**kwargs)}


def test_each_line_of_a_class_of_20_for_3_hours_is_its_hand_computation():
    assert RATES["trn1"].usd == 1.34 and RATES["gp3"].usd == 0.08  # the hand computations' rates
    got = items()
    life = 24 + 18  # 18:00 the evening before to noon the day after
    hand = {
        "cache builder": (45 + 117 + 10) / 60 * (1.34 + VOLUME_HOUR + 0.005),
        "test stack": 2 * 4 * (1.34 + VOLUME_HOUR) + 4 * 3 * 2 * 0.01
                      + 10 / 60 * (1.34 + VOLUME_HOUR) + 1 * 3 * 2 * 0.01,
        "evening launch": 20 * (45 + 60) / 60 * 1.34,
        "morning start": 20 * 0.5 * 1.34,
        "class hours": 20 * 3 * 1.34,
        "idle tail": 20 * 1 * 1.34,
        "volumes": 20 * life * VOLUME_HOUR,
        "interface endpoints": life * 3 * 2 * 0.01,
        # 09:00 a week before (the test stack) to noon the day after
        "NAT gateway": (8 * 24 + 3) * (0.045 + 0.005) + (20 + 2) * 2 * 0.045,
    }
    assert list(got) == list(hand)  # the run-sheet's order
    for what, usd in hand.items():
        assert got[what] == pytest.approx(usd), what
    assert got["class hours"] == pytest.approx(80.40) and got["volumes"] == pytest.approx(47.79, abs=0.005)


def test_spares_zones_and_idle_minutes_move_only_their_lines():
    base, spared = items(), items(spares=2)
    assert spared["morning start"] - base["morning start"] == pytest.approx(2 * 1 * 1.34)  # idle 60 min, then stop
    assert spared["evening launch"] - base["evening launch"] == pytest.approx(2 * 1.75 * 1.34)
    assert spared["volumes"] - base["volumes"] == pytest.approx(2 * 42 * VOLUME_HOUR)
    assert spared["class hours"] == base["class hours"] and spared["idle tail"] == base["idle tail"]
    three = items(zones=3)
    assert three["interface endpoints"] == pytest.approx(42 * 3 * 3 * 0.01)
    assert {k for k in base if three[k] != pytest.approx(base[k])} == {"interface endpoints", "test stack"}
    short = items(idle_minutes=20)
    assert short["idle tail"] == pytest.approx(20 * 20 / 60 * 1.34)
    assert short["evening launch"] == pytest.approx(20 * (45 + 20) / 60 * 1.34)
    # An endpoint's partial hour is billed as a full one.
    assert items(stack=Stack(45, 60, 3, 512))["test stack"] == pytest.approx(base["test stack"])


def test_totals_add_up_and_the_bundle_saves_exactly_the_nat_gateway():
    with_nat = bill(20, 3, stack=STACK, cache_minutes=PASS_MIN)
    bundle = bill(20, 3, stack=STACK, cache_minutes=PASS_MIN, nat=False)
    assert total(with_nat) == pytest.approx(sum(i.usd for i in with_nat))
    nat = {i.what: i.usd for i in with_nat}["NAT gateway"]
    assert nat > 0 and {i.what: i.usd for i in bundle}["NAT gateway"] == 0
    assert total(with_nat) - total(bundle) == pytest.approx(nat)
    unused, used = class_cost.spare_seat(20, 3, stack=STACK, cache_minutes=PASS_MIN)
    assert unused == pytest.approx(1.75 * 1.34 + 1 * 1.34 + 42 * VOLUME_HOUR + 2 * 0.045)
    assert used == pytest.approx(1.75 * 1.34 + 0.5 * 1.34 + 3 * 1.34 + 1 * 1.34 + 42 * VOLUME_HOUR + 2 * 0.045)


def test_bad_input_is_refused_saying_what_is_wanted(capsys):
    with pytest.raises(ValueError, match="seats and zones at least 1"):
        bill(0, 3, stack=STACK, cache_minutes=PASS_MIN)
    assert class_cost.main(["--seats", "20", "--hours", "0"]) == 2
    assert "hours over 0" in capsys.readouterr().err


def test_the_stacks_figures_are_read_from_the_template():
    template = load()
    assert class_cost.stack_figures(template) == class_cost.stack_figures()
    changed = copy.deepcopy(template)
    changed["Resources"][LABS_LOOP][2]["Lab${Seat}Ready"]["Properties"]["Timeout"] = "1800"
    changed["Parameters"]["IdleMinutes"]["Default"] = 20
    changed["Resources"]["Fn::ForEach::Endpoints"][1] = ["ssm", "ssmmessages"]
    figures = class_cost.stack_figures(changed)
    assert (figures.ready_minutes, figures.idle_minutes, figures.endpoint_services) == (30, 20, 2)
    assert figures.volume_gb == class_cost.stack_figures(template).volume_gb > 0


def test_every_rate_names_its_source_date_and_region():
    prices = json.loads((REPO_ROOT / "helpers" / "data" / "trn1_costs.json").read_text())["prices"]
    assert RATES["trn1"].usd == next(p["usd_per_hour"] for p in prices if p["instance"] == "trn1.2xlarge")
    sources = (REPO_ROOT / "docs" / "sources.md").read_text()
    gp3 = re.search(r'"\$(\d+\.\d+) per GB-month of General Purpose \(gp3\)', sources)
    assert RATES["gp3"].usd == float(gp3.group(1))
    for name, rate in RATES.items():
        assert rate.usd > 0 and rate.region and rate.unit, name
        assert re.fullmatch(r"\d{4}-\d{2}(-\d{2})?", rate.as_of), name
        assert rate.source.startswith("https://") or (REPO_ROOT / rate.source).exists(), name


def test_the_instructors_page_shows_the_commands_run_sheet_and_bill():
    page = (REPO_ROOT / "docs" / "instructor.md").read_text()
    assert class_cost.run_sheet() in page, "python -m deploy.class_cost --run-sheet, pasted into the run-sheet"
    assert class_cost.report(20, 3) in page, "make class-cost SEATS=20 HOURS=3, pasted under 'What the class costs'"
    assert f"{class_cost.quota_vcpus(20)} vCPUs\nfor 20 seats" in page
    # What the page says of the bill's shape, for 20 seats and 3 hours.
    assert "class hours are about a third of the bill" in page and "together cost more than the class hours" in page
    lines = {item.what: item.usd for item in bill(20, 3)}
    assert 0.28 < lines["class hours"] / sum(lines.values()) < 0.38
    assert lines["volumes"] + lines["evening launch"] + lines["idle tail"] > lines["class hours"]
    # The other lists before a class link to the run-sheet instead of repeating it.
    for other in ("docs/workshop-stack.md", "notebooks/README.md"):
        text = (REPO_ROOT / other).read_text()
        before = text[text.index("## Before the class\n"):]
        before = before[:before.index("\n## ", 1)]
        assert "instructor.md#the-run-sheet" in before and "\n1. " not in before, other


def test_each_seats_outputs_link_the_learners_page_and_no_page_saves_over_their_profiles():
    assert (REPO_ROOT / "docs" / "learner-handout.md").exists()
    outputs = load()["Outputs"]["Fn::ForEach::LabOutputs"][2]
    for name in ("Lab${Seat}Open", "Lab${Seat}OpenPowerShell"):
        assert "docs/learner-handout.md" in " ".join(outputs[name]["Description"].split()), name
    for page in ("docs/workshop-stack.md", "docs/learner-handout.md"):
        text = " ".join((REPO_ROOT / page).read_text().split())
        assert not re.search(r"sav\w+ (their|the|your) file as `~/\.aws/credentials`", text), page
