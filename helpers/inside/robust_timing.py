"""Timing short steps on a machine other work may share, and judging a line of such timings.

Each point is stepped many times, in rounds that visit every point in turn (a burst of other
work then slows a round of each point, not every step of one). A step further than OUTLIER_MADS
scaled median absolute deviations from its point's median is rejected (the MAD outlier rule,
Iglewicz and Hoaglin's robust z-score); the rest give the point's median and its interquartile
range (IQR). A point whose IQR is wider than MAX_SPREAD of its median is unreliable.

A line of points (one sweep: the batch, or the hidden width) can place a crossing only when
every point is reliable and the line has the shape a quiet machine draws: it rises with the
work (no point faster than the one before it beyond both IQRs) and no faster than its FLOPs
allow (a step's time may grow up to MAX_GROWTH times as fast as its FLOPs: larger matrices
leave the caches). Otherwise a busy machine drew it, and it says where.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

OUTLIER_MADS = 3.0
MAD_TO_SIGMA = 1.4826  # a normal distribution's standard deviation is 1.4826 MADs
MAX_SPREAD = 0.25
MAX_GROWTH = 2.0


@dataclass(frozen=True)
class Timing:
    """One point's step time: median and quartiles of the steps kept, how many were rejected."""
    median_s: float
    q1_s: float
    q3_s: float
    kept: int
    rejected: int

    @property
    def spread(self) -> float:
        """The IQR as a fraction of the median."""
        return (self.q3_s - self.q1_s) / self.median_s

    @property
    def reliable(self) -> bool:
        return self.spread <= MAX_SPREAD


def summarize(seconds: list[float]) -> Timing:
    """Median and IQR of the steps within OUTLIER_MADS scaled MADs of the median."""
    if len(seconds) < 2:
        raise ValueError(f"{len(seconds)} timed steps: a spread needs at least 2")
    middle = statistics.median(seconds)
    limit = OUTLIER_MADS * MAD_TO_SIGMA * statistics.median(abs(s - middle) for s in seconds)
    kept = [s for s in seconds if abs(s - middle) <= limit]
    if len(kept) < 2:
        kept = [middle, middle]  # every step but the median equally far from it: no spread
    q1, median, q3 = statistics.quantiles(kept, n=4, method="inclusive")
    return Timing(median, q1, q3, len(kept), len(seconds) - len(kept))


def time_interleaved(steps: dict, rounds: int = 7, warmup: int = 2, min_visit_s: float = 0.02,
                     max_per_visit: int = 100, wait=lambda: None, clock=time.perf_counter) -> dict:
    """{key: Timing} for {key: step()}: `warmup` untimed steps each, then `rounds` rounds that
    time each point's steps (waited for) until a visit lasts min_visit_s (at least one step)."""
    for step in steps.values():
        for _ in range(warmup):
            step()
        wait()
    seconds: dict = {key: [] for key in steps}
    for _ in range(rounds):
        for key, step in steps.items():
            visit = clock()
            for _ in range(max_per_visit):
                start = clock()
                step()
                wait()
                now = clock()
                seconds[key].append(now - start)
                if now - visit >= min_visit_s:
                    break
    return {key: summarize(times) for key, times in seconds.items()}


def line_faults(line: list, name: str) -> list[str]:
    """What keeps a line of (x, flops, Timing), in order of x, from placing a crossing: points
    too spread, a point faster than the one before it, a step growing faster than its FLOPs."""
    faults = [f"{name} {x:,}'s steps spread {t.spread:.0%} of their median (a usable point: at "
              f"most {MAX_SPREAD:.0%})" for x, _, t in line if not t.reliable]
    for (x0, f0, t0), (x1, f1, t1) in zip(line, line[1:]):
        if t1.q3_s < t0.q1_s:
            faults.append(f"{name} {x1:,} ({t1.median_s * 1e3:.3g} ms) ran faster than {name} "
                          f"{x0:,} ({t0.median_s * 1e3:.3g} ms)")
        elif t1.q1_s > t0.q3_s * MAX_GROWTH * f1 / f0:
            ratio = t1.median_s / t0.median_s
            faults.append(f"{name} {x1:,} ({t1.median_s * 1e3:.3g} ms) took "
                          f"{f'{ratio:.3g}' if ratio < 1000 else f'{ratio:,.0f}'} times {name} {x0:,} "
                          f"({t0.median_s * 1e3:.3g} ms) for {f1 / f0:.3g} times the FLOPs")
    return faults
