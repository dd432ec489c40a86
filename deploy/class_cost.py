"""A class on the workshop stack, from the quota request to the tear-down: its run-sheet and its bill.

One timeline, two readers. docs/instructor.md's run-sheet is `run_sheet()` word for word, and
`make class-cost SEATS=20 HOURS=3 [SPARES=N] [ZONES=K] [IDLE=M]` prices the same steps
(`python -m deploy.class_cost --run-sheet` prints the table).
tests/test_class_cost.py holds both pages to this module, and each line item to a hand computation.
The figures the stack decides (the labs' wait, the default IdleMinutes, the interface endpoints,
the volume's size) are read from deploy/workshop.yaml; the cache builder's pass from the workbook's
clock (helpers.classroom.time_budget); the trn1 rate from helpers/data/trn1_costs.json. Every
other figure is in RATES or in the timeline below, each with its source, its date and its Region,
or labelled a model.
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from deploy.template import LABS_LOOP, load

REPO = Path(__file__).resolve().parent.parent
TRN1_COSTS = REPO / "helpers" / "data" / "trn1_costs.json"
INSTANCE_TYPE = "trn1.2xlarge"
VCPUS = 8  # a trn1.2xlarge's vCPUs (docs/workshop-stack.md, the quota)
HOURS_PER_MONTH = 30 * 24  # a GB-month prorated over a 30-day month, as docs/workshop-stack.md's table does


@dataclass(frozen=True)
class Rate:
    usd: float
    unit: str
    region: str
    source: str
    as_of: str
    note: str = ""


def _trn1_rate() -> Rate:
    (entry,) = [p for p in json.loads(TRN1_COSTS.read_text())["prices"] if p["instance"] == INSTANCE_TYPE]
    return Rate(entry["usd_per_hour"], "per instance-hour", entry["pricing"], entry["source"], entry["as_of"])


RATES = {
    "trn1": _trn1_rate(),
    "gp3": Rate(0.08, "per GB-month", "us-east-1",
                "https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonEC2/current/us-east-1/index.json",
                "2026-11", "the gp3 storage SKU's description, as docs/sources.md quotes it"),
    "endpoint": Rate(0.01, "per endpoint per Availability Zone per hour, each partial hour billed as a full one",
                     "us-east-1", "https://aws.amazon.com/privatelink/pricing/", "2026-12",
                     "an assumption: the page's hourly table was not readable from here (docs/sources.md)"),
    "nat_hour": Rate(0.045, "per NAT gateway-hour", "us-east-1", "https://aws.amazon.com/vpc/pricing/", "2026-12",
                     "an assumption: AWS's page was not readable from here; the us-east-1 rate as "
                     "public guides to it state it (docs/sources.md)"),
    "nat_gb": Rate(0.045, "per GB through the NAT gateway", "us-east-1", "https://aws.amazon.com/vpc/pricing/",
                   "2026-12", "an assumption, as the hourly rate"),
    "ipv4": Rate(0.005, "per public IPv4 address-hour", "all Regions", "docs/sources.md", "2024-02", "as announced"),
}
GB_PER_FIRST_BOOT = 2.0  # what a lab fetches at its first boot without the bundle (docs/workshop-stack.md: git, pip, MNIST)


@dataclass(frozen=True)
class Stack:
    """What the template decides: the labs' longest wait for the signal, IdleMinutes' default,
    the interface endpoints' services and a lab's volume."""
    ready_minutes: int
    idle_minutes: int
    endpoint_services: int
    volume_gb: int


def stack_figures(template: dict | None = None) -> Stack:
    if template is None:
        return _this_stack()
    fragment = template["Resources"][LABS_LOOP][2]
    wait = fragment["Lab${Seat}Ready"]["Properties"]["Timeout"]
    (_, services, _) = template["Resources"]["Fn::ForEach::Endpoints"]
    instance = fragment["Lab${Seat}"]["Properties"]
    if "BlockDeviceMappings" in instance:
        volume = instance["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"]
    else:  # the size may sit in the launch template
        data = template["Resources"]["LabLaunchTemplate"]["Properties"]["LaunchTemplateData"]
        volume = data["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"]
    return Stack(int(wait) // 60, int(template["Parameters"]["IdleMinutes"]["Default"]), len(services), int(volume))


@functools.lru_cache(maxsize=1)
def _this_stack() -> Stack:
    return stack_figures(load())


@functools.lru_cache(maxsize=1)
def cache_pass_minutes() -> float:
    """The classroom cache's pass on one trn1, from the workbook's clock: every cell, the optional
    ones too, and every `neuronx-cc` run at the slowest published compile (a model, the upper figure)."""
    from helpers.classroom import time_budget

    totals = time_budget.totals()
    optional_cells = sum(time_budget.RUN_S[n][1] for n in time_budget.BUDGET) / 60
    return totals.cells + optional_cells + totals.compiles * time_budget.SLOWEST_COMPILE_S / 60


# The timeline. Days count from the class's day (0); hours are the clock of that day. Durations
# are models from the figures named beside them; none was measured on AWS here.
EVENING_LAUNCH_HOUR = 18  # the day before: launch, so a lab that fails has a night to be replaced
MORNING_LEAD_HOURS = 0.5  # the labs started this long before the class: a start, JupyterLab's 3 min wait (LAB_READY_SECONDS), a spare
TEARDOWN = (1, 12)  # the day after, at noon: delete everything
TEST_STACK_DAY, TEST_STACK_HOURS = -7, 4.0  # create (up to the labs' wait), the twelve checks with an IdleMinutes stop and an hour with no mail, update, delete
FAILING_STACK_MINUTES = 10  # check 8: a second stack whose one lab fails "within minutes" (cannot clone)
UPLOAD_MINUTES = 10  # the classroom archive's and the bundle's upload to S3 (modelled)
NAT_FROM = (TEST_STACK_DAY, 9)  # a NAT gateway made for the class lives from the test stack to the tear-down
TEST_SEATS = 2
CACHE_BUILDERS = 1


def hours_between(start: tuple[int, float], end: tuple[int, float]) -> float:
    return (end[0] - start[0]) * 24 + end[1] - start[1]


@dataclass(frozen=True)
class Item:
    what: str
    usd: float
    how: str


def bill(seats: int, hours: float, spares: int = 0, zones: int = 2, idle_minutes: int | None = None,
         nat: bool = True, stack: Stack | None = None, cache_minutes: float | None = None) -> list[Item]:
    """Every line of the class's bill, in the run-sheet's order. `nat` False: the labs read the
    class bundle through the S3 gateway endpoint and no NAT gateway is made."""
    if seats < 1 or hours <= 0 or spares < 0 or zones < 1:
        raise ValueError("seats and zones at least 1, hours over 0, spares 0 or more")
    stack = stack or stack_figures()
    idle = stack.idle_minutes if idle_minutes is None else idle_minutes
    cache_minutes = cache_pass_minutes() if cache_minutes is None else cache_minutes
    trn1, gp3, endpoint = RATES["trn1"].usd, RATES["gp3"].usd, RATES["endpoint"].usd
    labs = seats + spares
    ready_h, idle_h = stack.ready_minutes / 60, idle / 60
    volume_hour = stack.volume_gb * gp3 / HOURS_PER_MONTH
    endpoints_hour = stack.endpoint_services * zones * endpoint
    life = hours_between((-1, EVENING_LAUNCH_HOUR), TEARDOWN)
    builder_h = (stack.ready_minutes + cache_minutes + UPLOAD_MINUTES) / 60
    items = [
        Item("cache builder", CACHE_BUILDERS * builder_h * (trn1 + volume_hour + RATES["ipv4"].usd),
             f"{CACHE_BUILDERS} trn1 for {builder_h:.2f} h (make venv data within the labs' "
             f"{stack.ready_minutes} min, the pass {cache_minutes:.0f} min, the upload {UPLOAD_MINUTES} min), "
             f"its {stack.volume_gb} GB volume and public address"),
        Item("test stack", TEST_SEATS * TEST_STACK_HOURS * (trn1 + volume_hour)
             + math.ceil(TEST_STACK_HOURS) * endpoints_hour
             + FAILING_STACK_MINUTES / 60 * (trn1 + volume_hour) + 1 * endpoints_hour,
             f"{TEST_SEATS} labs running its {TEST_STACK_HOURS:g} h (an upper bound), its endpoints, and the "
             f"failing launch's lab for {FAILING_STACK_MINUTES} min with an hour of endpoints"),
        Item("evening launch", labs * (ready_h + idle_h) * trn1,
             f"{labs} labs, each up to {stack.ready_minutes} min to its signal, then {idle} min idle before it stops"),
        Item("morning start", (seats * MORNING_LEAD_HOURS + spares * idle_h) * trn1,
             f"{labs} labs started {MORNING_LEAD_HOURS * 60:.0f} min before the class; a spare nobody "
             f"takes runs {idle} min before it stops"),
        Item("class hours", seats * hours * trn1, f"{seats} seats × {hours:g} h"),
        Item("idle tail", seats * idle_h * trn1, f"{seats} labs idle {idle} min after the class before they stop"),
        Item("volumes", labs * life * volume_hour,
             f"{labs} × {stack.volume_gb} GB for the stack's {life:g} h, launch to tear-down"),
        Item("interface endpoints", math.ceil(life) * endpoints_hour,
             f"{stack.endpoint_services} endpoints × {zones} zones for {life:g} h"),
    ]
    if nat:
        nat_h = hours_between(NAT_FROM, TEARDOWN)
        boots = labs + TEST_SEATS
        items.append(Item("NAT gateway", nat_h * (RATES["nat_hour"].usd + RATES["ipv4"].usd)
                          + boots * GB_PER_FIRST_BOOT * RATES["nat_gb"].usd,
                          f"{nat_h:g} h with its public address, and {GB_PER_FIRST_BOOT:g} GB for each of "
                          f"{boots} first boots"))
    else:
        items.append(Item("NAT gateway", 0.0, "none: the labs read the class bundle through the S3 gateway endpoint"))
    return items


def total(items: list[Item]) -> float:
    return sum(item.usd for item in items)


def spare_seat(seats: int, hours: float, spares: int = 0, **kwargs) -> tuple[float, float]:
    """(a spare nobody takes, a spare handed out for the whole class): what one more lab adds."""
    base = total(bill(seats, hours, spares, **kwargs))
    unused = total(bill(seats, hours, spares + 1, **kwargs)) - base
    used = total(bill(seats + 1, hours, spares, **kwargs)) - base
    return unused, used


def quota_vcpus(seats: int, spares: int = 0) -> int:
    """The quota "Running On-Demand Trn instances" the class asks for: every seat and spare, with
    room for the test stack and the cache builder running beside it."""
    return VCPUS * (seats + spares + TEST_SEATS + CACHE_BUILDERS)


@dataclass(frozen=True)
class Step:
    when: str
    who: str
    what: str
    takes: str
    check: str


def timeline(stack: Stack | None = None, cache_minutes: float | None = None) -> list[Step]:
    stack = stack or stack_figures()
    cache_minutes = cache_pass_minutes() if cache_minutes is None else cache_minutes
    ready, idle = stack.ready_minutes, stack.idle_minutes
    return [
        Step("3 weeks before", "instructor",
             "[The quota](#the-quota), in a [Region whose zones offer trn1.2xlarge](#regions-and-zones)",
             "10 min to ask; AWS's answer takes days (not in the sources)",
             "the quota's applied value is at least `make class-cost`'s figure"),
        Step("3 weeks before", "instructor",
             "[The network, the account and your principal](#the-network-the-account-and-your-principal)",
             "1 h (modelled)", "the VPC's subnets, route tables, trail and EBS key as listed"),
        Step("2 weeks before", "instructor",
             "[The classroom cache and the class bundle](#the-classroom-cache-and-the-class-bundle), to S3",
             f"{(ready + cache_minutes + UPLOAD_MINUTES) / 60:.1f} h on one trn1 (modelled: `make venv data` "
             f"within the labs' {ready} min, the pass {cache_minutes:.0f} min at the slowest compile, "
             f"the upload {UPLOAD_MINUTES} min)",
             "`make classroom-check` reports 0 graphs outside the cache; the objects are in the stack's Region"),
        Step("1 week before", "instructor",
             "[Policy checks with Access Analyzer](#policy-checks-with-access-analyzer), then "
             "[the test stack](#the-test-stack), then the learners' website",
             f"{TEST_STACK_HOURS:g} h (modelled: up to {ready} min to the signals, a lab's idle stop after {idle} min, "
             "an hour with no mail)",
             "every check of the test stack's list passes; the test stack is deleted"),
        Step("1 week before", "learner",
             "[The learner's page](learner-handout.md): the AWS CLI and the Session Manager plugin",
             "15 min (modelled)", "`aws --version` and `session-manager-plugin --version` answer"),
        Step("the evening before", "instructor",
             "[Launch the class](#the-evening-before)",
             f"up to {ready} min (the labs' wait), then each lab stops after {idle} min",
             "`CREATE_COMPLETE`, one `is ready` per lab"),
        Step("the morning", "instructor", "[Start the labs, hand out the seats](#the-morning)",
             f"{MORNING_LEAD_HOURS * 60:.0f} min before the class (modelled: a start, JupyterLab's 3-min wait, "
             "the credentials loop)",
             "every lab `running`; every credentials file has keys; one lab opened with its seat's command"),
        Step("the class", "learner", "[Open the lab, notebooks 00 to 07](#the-class)",
             "the class's hours",
             "notebook 00's checklist all green"),
        Step("the day after", "instructor", "[Tear everything down](#the-tear-down)", "30 min (modelled)",
             "no instance, volume, endpoint or parameter of the class left (the commands below)"),
    ]


def run_sheet(**kwargs) -> str:
    rows = ["| when | who | what | how long | check before going on |", "|---|---|---|---|---|"]
    rows += [f"| {s.when} | {s.who} | {s.what} | {s.takes} | {s.check} |" for s in timeline(**kwargs)]
    return "\n".join(rows)


def report(seats: int, hours: float, spares: int = 0, zones: int = 2, idle_minutes: int | None = None) -> str:
    def money(usd: float) -> str:
        return f"${usd:,.2f}"
    lines = [f"A class of {seats} seats ({spares} spare) for {hours:g} h in {zones} zones, "
             f"priced over docs/instructor.md's run-sheet:"]
    totals = {}
    for nat in (True, False):
        items = bill(seats, hours, spares, zones, idle_minutes, nat=nat)
        totals[nat] = total(items)
        if nat:
            lines += [f"  {item.what:<20} {money(item.usd):>10}  {item.how}" for item in items]
    lines.append(f"  {'total':<20} {money(totals[True]):>10}  with a NAT gateway made for the class")
    lines.append(f"  {'total':<20} {money(totals[False]):>10}  with the class bundle and no NAT gateway")
    unused, used = spare_seat(seats, hours, spares=spares, zones=zones, idle_minutes=idle_minutes)
    lines.append(f"A spare seat: {money(unused)} if nobody takes it, {money(used)} if it is taken for the class.")
    lines.append(f"The quota to ask for: {quota_vcpus(seats, spares)} vCPUs of \"Running On-Demand Trn instances\".")
    lines.append("Rates:")
    lines += [f"  {name}: ${rate.usd:g} {rate.unit}; {rate.region}; {rate.source} (as of {rate.as_of})"
              + (f"; {rate.note}" if rate.note else "") for name, rate in RATES.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.class_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--seats", type=int, default=20)
    parser.add_argument("--hours", type=float, default=3)
    parser.add_argument("--spares", type=int, default=0)
    parser.add_argument("--zones", type=int, default=2, help="Availability Zones of the stack's subnets")
    parser.add_argument("--idle-minutes", type=int, help="the stack's IdleMinutes (its default if not given)")
    parser.add_argument("--run-sheet", action="store_true", help="print docs/instructor.md's run-sheet table")
    args = parser.parse_args(argv)
    try:
        print(run_sheet() if args.run_sheet else report(args.seats, args.hours, args.spares, args.zones,
                                                          args.idle_minutes))
    except ValueError as err:
        print(f"class-cost: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
