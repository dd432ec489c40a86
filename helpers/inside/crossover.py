"""Where notebook 07's measured CPU line and a modelled NeuronCore cross, placed only where the
measurements allow. The model is the notebook's own: a function of a step's FLOPs.

Along one sweep of the CPU's points (the batch at fixed widths, or the first hidden width at one
batch) the crossing is interpolated on log scales between the last point where the CPU wins and
the first where the core does, on the CPU's medians; the same on its first and third quartiles
gives the range the CPU's spread allows. None is placed when robust_timing.line_faults finds the
line drawn by a busy machine, when the core's lead comes and goes along the sweep, or when the
crossing lies inside the CPU's spread (one quartile line crosses, the other does not): the
crossing then says why not and what to do.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from helpers.inside.core_model import matmul_flops
from helpers.inside.robust_timing import Timing, line_faults

BUSY_ADVICE = ("the machine was too busy to measure. Close other work on this machine (other "
               "notebooks' kernels, builds, browsers' busy tabs), then re-run the CPU cell and this one")
DOUBT_ADVICE = ("the CPU's spread cannot tell where. Re-run the CPU cell and this one (a quieter "
                "machine spreads less)")


def as_timing(value) -> Timing:
    """A Timing as it is; seconds (one figure, no spread) as a Timing."""
    return value if isinstance(value, Timing) else Timing(value, value, value, 1, 0)


def sweep_line(cpu: dict, widths=None, batch=None) -> list:
    """[(x, key, Timing)] along one sweep (fixed widths: x is the batch; fixed batch: x is the
    first hidden width), in order of x."""
    line = sorted(((key[0] if batch is None else key[1][0], key, as_timing(value))
                   for key, value in cpu.items()
                   if (widths is None or key[1] == tuple(widths)) and (batch is None or key[0] == batch)),
                  key=lambda point: point[0])
    if not line:
        raise ValueError("no measured point in that sweep: give widths= or batch= of the sweep")
    return line


def _first_crossing(points: list):
    """points: [(x, cpu seconds, core seconds)]. The x where the core starts to win; 0 when it
    wins at the first point; None when it wins nowhere."""
    gap = [(x, math.log(cpu / core)) for x, cpu, core in points]
    if gap[0][1] > 0:
        return 0
    for (x0, g0), (x1, g1) in zip(gap, gap[1:]):
        if g1 > 0:
            return math.exp(math.log(x0) + (math.log(x1) - math.log(x0)) * -g0 / (g1 - g0))
    return None


def _at(x, along: str) -> str:
    if x is None:
        return "nowhere measured"
    return f"the smallest {along} measured" if x == 0 else f"about {along} {x:,.0f}"


@dataclass(frozen=True)
class Crossing:
    """Where the core's step starts to beat the CPU's along one sweep. at: on the CPU's medians
    (0: from the sweep's first point; None: nowhere measured); within: on its third and first
    quartiles; faults: why the measurements place none (empty when they do); busy: whether the
    CPU line's own shape or spread is among them."""
    along: str
    at: float | None
    within: tuple = (None, None)
    faults: list = field(default_factory=list)
    busy: bool = False
    first: int = 0

    @property
    def placed(self) -> bool:
        return not self.faults

    @property
    def why_not(self) -> str:
        """Why no crossover is printed and what to do ("" when one is)."""
        if self.placed:
            return ""
        more = f"; and {len(self.faults) - 2} more" if len(self.faults) > 2 else ""
        advice = BUSY_ADVICE if self.busy else DOUBT_ADVICE
        return f"no crossover printed: {'; '.join(self.faults[:2])}{more}:\n  {advice}"

    @property
    def short(self) -> str:
        """For a table cell."""
        if self.faults:
            return "busy machine" if self.busy else "inside the spread"
        if self.at is None:
            return "none measured"
        return f"{self.first} or less" if self.at == 0 else f"{self.at:,.0f}"

    def __str__(self) -> str:
        if self.faults:
            return self.why_not
        low, high = ("none" if x is None else "the first point" if x == 0 else f"{x:,.0f}"
                     for x in self.within)
        spread = "" if low == high else f" ({low} to {high} within the CPU's spread)"
        return _at(self.at, self.along) + spread


def find_crossover(cpu: dict, core_step_s, widths=None, batch=None) -> Crossing:
    """Where core_step_s (seconds per step, a function of the step's FLOPs) starts to beat the
    CPU's measured steps along one sweep (widths=: by batch; batch=: by width)."""
    line = sweep_line(cpu, widths, batch)
    along = "batch" if batch is None else "width"
    faults = line_faults([(x, matmul_flops(*key), t) for x, key, t in line], along)
    busy = bool(faults)
    quartile = {q: [(x, getattr(t, q), core_step_s(matmul_flops(*key))) for x, key, t in line]
                for q in ("median_s", "q3_s", "q1_s")}
    for points in quartile.values():
        wins = [cpu > core for _, cpu, core in points]
        lost = [x for (x, *_), before, now in zip(points[1:], wins, wins[1:]) if before and not now]
        if lost and not faults:
            faults.append(f"the modelled core wins before {along} {lost[0]:,} and loses there")
    at, after_q3, after_q1 = (_first_crossing(quartile[q]) for q in ("median_s", "q3_s", "q1_s"))
    if (after_q3 is None) != (after_q1 is None) and not faults:
        faults.append(f"the crossing lies inside the CPU's spread at the sweep's largest {along}")
    return Crossing(along, at, (after_q3, after_q1), faults, busy, line[0][0])
