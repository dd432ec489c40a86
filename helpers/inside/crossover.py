"""Where notebook 07's measured CPU line and a modelled NeuronCore cross, printed only where the
measurements place it.

Along one sweep of the CPU's points (the batch at fixed widths, or the first hidden width at one
batch) the crossing is interpolated on log scales between the last point where the CPU wins and
the first where the core does, on the CPU's medians; the same on its first and third quartiles
gives the range the CPU's spread allows. None is placed when robust_timing.line_faults finds the
line drawn by a busy machine, when the core's lead comes and goes along the sweep, or when the
crossing lies inside the CPU's spread (one quartile line crosses, the other does not): the
sentence then says so and what to do. Also here: how far each unknown of the model moves the
crossing, each varied alone, and what a data loader's cost per image changes.
"""
from __future__ import annotations

import math
from dataclasses import replace

from helpers.inside.core_model import TUTORIAL_WIDTHS, matmul_flops, model_terms
from helpers.inside.robust_timing import Timing, line_faults

BUSY_ADVICE = ("the machine was too busy to measure. Close other work on this machine (other "
               "notebooks' kernels, builds, browsers' busy tabs), then re-run the CPU cell and this one")
DOUBT_ADVICE = ("the CPU's spread cannot tell where. Re-run the CPU cell and this one (a quieter "
                "machine spreads less)")
EFFICIENCIES = (1.0, 0.1, 0.03, 0.01)  # the core's FLOP rate as a fraction of peak: the slope's range


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


def sweep_faults(line: list, name: str) -> list[str]:
    """robust_timing.line_faults of a sweep_line, each point's work its step's FLOPs."""
    return line_faults([(x, matmul_flops(*key), t) for x, key, t in line], name)


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


def crossing(cpu: dict, model, widths=None, batch=None):
    """The crossing on the CPU's medians (see _first_crossing), whatever the line's shape."""
    return _first_crossing([(x, t.median_s, model.step_s(*key)) for x, key, t in
                            sweep_line(cpu, widths, batch)])


def placed_crossing(cpu: dict, model, widths=None, batch=None) -> dict:
    """{"at": the crossing on the medians, "within": (on the third quartiles, on the first),
    "faults": why the measurements place none (empty when they do), "busy": whether the CPU
    line's own shape or spread is among them (not only where this model meets it)}."""
    line = sweep_line(cpu, widths, batch)
    name = "batch" if batch is None else "width"
    faults = sweep_faults(line, name)
    busy = bool(faults)
    quartile = {q: [(x, getattr(t, q), model.step_s(*key)) for x, key, t in line]
                for q in ("median_s", "q3_s", "q1_s")}
    for points in quartile.values():
        wins = [cpu > core for _, cpu, core in points]
        lost = [x for (x, *_), before, now in zip(points[1:], wins, wins[1:]) if before and not now]
        if lost and not faults:
            faults.append(f"the modelled core wins before {name} {lost[0]:,} and loses there")
    at, after_q3, after_q1 = (_first_crossing(quartile[q]) for q in ("median_s", "q3_s", "q1_s"))
    if (after_q3 is None) != (after_q1 is None) and not faults:
        faults.append(f"the crossing lies inside the CPU's spread at the sweep's largest {name}")
    return {"at": at, "within": (after_q3, after_q1), "faults": faults, "first": line[0][0],
            "busy": busy}


def crossover_range(cpu: dict, terms: dict, widths=None, batch=None) -> dict:
    """The placed crossing for both ends of the model's fixed-cost range, and the core's speed-up
    over the CPU's median at the sweep's largest point for each (high end, low end)."""
    _, key, largest = sweep_line(cpu, widths, batch)[-1]
    return {"from": placed_crossing(cpu, terms["low"], widths, batch),
            "to": placed_crossing(cpu, terms["high"], widths, batch), "largest": key,
            "speedup": tuple(largest.median_s / terms[end].step_s(*key) for end in ("high", "low"))}


def _at(x, along: str) -> str:
    if x is None:
        return "nowhere measured"
    return f"the smallest {along} measured" if x == 0 else f"about {along} {x:,.0f}"


def _within(found: dict) -> str:
    """The crossings on the CPU's third and first quartiles, when they differ from each other."""
    low, high = ("none" if x is None else "the first point" if x == 0 else f"{x:,.0f}"
                 for x in found["within"])
    return "" if low == high else f"{low} to {high} within the CPU's spread; "


def describe_crossover(found: dict, along: str) -> str:
    """The sentence for a crossover_range() result (along: "batch" or "width"); when the CPU's
    measurements place no crossing, why not and what to do."""
    faults = found["from"]["faults"] or found["to"]["faults"]
    if faults:
        more = f"; and {len(faults) - 2} more" if len(faults) > 2 else ""
        advice = BUSY_ADVICE if found["from"]["busy"] else DOUBT_ADVICE
        return f"by {along}: no crossover printed: {'; '.join(faults[:2])}{more}:\n  {advice}"
    key = found["largest"]
    largest = f"batch {key[0]}" if along == "batch" else f"width {key[1][0]}"
    high, low = found["speedup"]
    return (f"by {along}: one NeuronCore (modelled) overtakes this CPU from "
            f"{_at(found['from']['at'], along)} ({_within(found['from'])}the band's low end) "
            f"to {_at(found['to']['at'], along)} ({_within(found['to'])}its high end);\n"
            f"  at {largest} the core would be {low:.1f}x as fast as the CPU at the band's low end, "
            f"{high:.1f}x at its high end, if it ran at FP32 peak")


def crossover_sensitivity(cpu: dict, widths=TUTORIAL_WIDTHS, efficiencies=EFFICIENCIES) -> dict:
    """{"rows": [(efficiency, placed crossing at the loader's largest share, at no share)], "faults":
    the CPU line's own} along the batch sweep, the core's products at each fraction of peak:
    each unknown varied alone."""
    line = sweep_line(cpu, widths=widths)
    rows = []
    for efficiency in efficiencies:
        terms = model_terms(efficiency=efficiency)
        rows.append((efficiency, *(placed_crossing(cpu, terms[end], widths=widths)
                                   for end in ("low", "high"))))
    return {"rows": rows, "faults": sweep_faults(line, "batch")}


def _batch(found: dict):
    """A placed crossing's batch (the sweep's first for "from the first point"), else None."""
    return None if found["faults"] or found["at"] is None else max(found["at"], found["first"])


def _fold(a, b) -> float:
    """How many times farther one crossing is than the other: inf when only one is placed."""
    if a is None or b is None:
        return 1.0 if a is b else math.inf
    return max(a, b) / min(a, b)


def _cell(found: dict) -> str:
    if found["faults"]:
        return "inside the spread"
    if found["at"] is None:
        return "none measured"
    return f"{found['first']} or less" if found["at"] == 0 else f"{found['at']:,.0f}"


def describe_sensitivity(sensitivity: dict, terms: dict) -> str:
    """A table of crossover_sensitivity()'s rows, and which unknown moves the crossover most."""
    from helpers.show.tables import text_table

    title = "the batch from which the core overtakes, each unknown varied alone:"
    if sensitivity["faults"]:
        return f"{title} not placed (the CPU's line, above, was drawn by a busy machine)"
    rows = sensitivity["rows"]
    table = text_table([[f"{e:.0%} of peak", _cell(low), _cell(high)] for e, low, high in rows],
                       ["the core's FLOP rate", f"loader's share {terms['loader_max_s'] * 1e3:.2f} ms",
                        "loader's share 0"], right={1, 2}, rule=True)
    by_loader = _fold(*map(_batch, rows[0][1:]))
    by_rate = max(_fold(_batch(rows[0][i]), _batch(rows[-1][i])) for i in (1, 2))
    most = "the loader's share" if by_loader >= by_rate else "the FLOP rate"
    return (f"{title}\n{table}\nat peak the loader's share moves it {by_loader:.1f}-fold; from peak "
            f"to {rows[-1][0]:.0%} of it the FLOP rate moves it up to {by_rate:.1f}-fold: over these "
            f"ranges {most} moves it most")


def describe_loader(cpu: dict, terms: dict, per_image: dict, widths=TUTORIAL_WIDTHS) -> str:
    """What a data loader costing per_image ({batch: Timing of one image}) changes: in both loops,
    in series, it adds the same to both steps (the crossovers stay, the core's lead shrinks);
    overlapped with the core's step (MpDeviceLoader), it outlasts the step from some batch on."""
    costs = ", ".join(f"{t.median_s * 1e6:.0f} µs at batch {b}" for b, t in per_image.items())
    title = f"the loader alone, per image: {costs} (a cost per image; the band leaves it out)"
    line = sweep_line(cpu, widths=widths)
    faults = sweep_faults(line, "batch")
    busy = [f"at batch {b} its timings spread {t.spread:.0%}" + (
        "" if t.cpu_share is None else f", on a CPU {t.cpu_share:.0%} of the time")
        for b, t in per_image.items() if not t.reliable]
    if faults or busy:
        return (f"{title}\n  what it changes is not placed: a busy machine's measurements ("
                + "; ".join(busy + (["the CPU line above"] if faults else [])) + ")")
    _, key, largest = line[-1]
    seconds = per_image[max(per_image)].median_s
    loaded = {end: replace(terms[end], loader_per_image_s=seconds) for end in ("low", "high")}
    lead = [(largest.median_s + seconds * key[0]) / loaded[end].step_s(*key) for end in ("low", "high")]
    saved = seconds - matmul_flops(1, widths) / terms["high"].peak_flops
    outlasts = f"about batch {terms['high'].fixed_s / saved:,.0f}" if saved > 0 else "no batch"
    return (f"{title}\n  in series in both loops it adds the same to both: the crossovers stay; "
            f"at batch {key[0]} the core's lead falls to {lead[0]:.2f}x (low end) and {lead[1]:.2f}x "
            f"(high end)\n  overlapped with the core's step (MpDeviceLoader), it outlasts the band's "
            f"high end from {outlasts}: from there the loop runs at the loader's pace")
