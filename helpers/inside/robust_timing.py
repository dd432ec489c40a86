"""Timing short steps on a machine other work may share, and judging a line of such timings.

Each point is stepped many times, in rounds that visit every point in turn (a burst of other
work then slows a round of each point, not every step of one). A step further than OUTLIER_MADS
scaled median absolute deviations from its point's median is rejected (the MAD outlier rule,
Iglewicz and Hoaglin's robust z-score); the rest give the point's median and its interquartile
range (IQR). A point whose IQR is wider than MAX_SPREAD of its median is unreliable; so is a
point whose steps had a CPU (the process's CPU time, all its threads) for less than
MIN_CPU_SHARE of their wall time: they waited while other work held the cores, which can slow
every step alike (a quota's throttling, threads waiting on each other) and leave no spread.

A line of points (one sweep: the batch, or the hidden width) can place a crossing only when
every point is reliable and the line has the shape a quiet machine draws: it rises with the
work (no point faster than the one before it beyond both IQRs) and no faster than its FLOPs
allow (a step's time may grow up to MAX_GROWTH times as fast as its FLOPs: larger matrices
leave the caches); from its first point to its last it grows at least as the square root of
the FLOPs (a line flattened by waiting does not: its small steps were slowed the most).
Otherwise a busy machine drew it, and it says where. A point slower than one doing more work
(flag_slower_than_more_work) is itself marked busy, on any line it belongs to.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, replace

OUTLIER_MADS = 3.0
MAD_TO_SIGMA = 1.4826  # a normal distribution's standard deviation is 1.4826 MADs
# A quiet 2-core VM spreads 1 ms steps up to about 40 % of their median (OS jitter, not other
# work); whether a crossing stands inside that spread is judged on the quartile lines instead.
MAX_SPREAD = 0.5
MAX_GROWTH = 2.0
MIN_CPU_SHARE = 0.9  # a step on a quiet machine keeps at least its own thread on a CPU: 1.0 or more


@dataclass(frozen=True)
class Timing:
    """One point's step time: median and quartiles of the steps kept, how many were rejected."""
    median_s: float
    q1_s: float
    q3_s: float
    kept: int
    rejected: int
    cpu_share: float | None = None  # CPU time / wall time of the steps kept (None: not measured)
    busy_note: str | None = None  # why the measurement itself found the machine busy (None: it did not)

    @property
    def spread(self) -> float:
        """The IQR as a fraction of the median."""
        return (self.q3_s - self.q1_s) / self.median_s

    @property
    def reliable(self) -> bool:
        return (self.spread <= MAX_SPREAD and self.busy_note is None
                and (self.cpu_share is None or self.cpu_share >= MIN_CPU_SHARE))


def summarize(seconds: list[float], cpu_seconds: list[float] | None = None) -> Timing:
    """Median and IQR of the steps within OUTLIER_MADS scaled MADs of the median; with each
    step's CPU time, the share of their wall time the kept steps had a CPU."""
    if len(seconds) < 2:
        raise ValueError(f"{len(seconds)} timed steps: a spread needs at least 2")
    middle = statistics.median(seconds)
    limit = OUTLIER_MADS * MAD_TO_SIGMA * statistics.median(abs(s - middle) for s in seconds)
    keep = [i for i, s in enumerate(seconds) if abs(s - middle) <= limit]
    kept = [seconds[i] for i in keep]
    share = None if cpu_seconds is None else sum(cpu_seconds[i] for i in keep) / sum(kept)
    if len(kept) < 2:
        kept = [middle, middle]  # every step but the median equally far from it: no spread
    q1, median, q3 = statistics.quantiles(kept, n=4, method="inclusive")
    return Timing(median, q1, q3, len(keep), len(seconds) - len(keep), share)


def time_interleaved(steps: dict, rounds: int = 7, warmup: int = 2, min_visit_s: float = 0.02,
                     max_per_visit: int = 100, wait=lambda: None, clock=time.perf_counter,
                     cpu_clock=None) -> dict:
    """{key: Timing} for {key: step()}: `warmup` untimed steps each, then `rounds` rounds that
    time each point's steps (waited for) until a visit lasts min_visit_s (at least one step).
    cpu_clock (e.g. time.process_time, for work done on this host) also measures each step's
    CPU time; leave it out where a device does the work and the host only waits."""
    for step in steps.values():
        for _ in range(warmup):
            step()
        wait()
    seconds: dict = {key: [] for key in steps}
    cpu: dict = {key: [] for key in steps}
    for _ in range(rounds):
        for key, step in steps.items():
            visit = clock()
            for _ in range(max_per_visit):
                start, cpu_start = clock(), cpu_clock() if cpu_clock else 0.0
                step()
                wait()
                now = clock()
                seconds[key].append(now - start)
                cpu[key].append(cpu_clock() - cpu_start if cpu_clock else 0.0)
                if now - visit >= min_visit_s:
                    break
    return {key: summarize(times, cpu[key] if cpu_clock else None) for key, times in seconds.items()}


def flag_slower_than_more_work(timed: dict, more_work, name=str) -> dict:
    """{key: Timing} with a busy_note on each point whose steps took longer than those of a
    point doing more work (more_work(a, b): b's step does a's work and more, e.g. 4 times the
    batch), beyond both IQRs: a step cannot get faster as its work grows, so other work slowed
    the point (a burst can slow one point's rounds alike and leave no spread)."""
    flagged = dict(timed)
    for key, t in timed.items():
        larger = [(other, u) for other, u in timed.items() if more_work(key, other) and t.q1_s > u.q3_s]
        if larger and t.busy_note is None:
            other, u = larger[0]
            note = (f"{name(key)} ({t.median_s * 1e3:.3g} ms) took longer than {name(other)} "
                    f"({u.median_s * 1e3:.3g} ms), which does more work (other work slowed it)")
            flagged[key] = replace(t, busy_note=note)
    return flagged


def line_faults(line: list, name: str) -> list[str]:
    """What keeps a line of (x, flops, Timing), in order of x, from placing a crossing: points
    too spread, a point faster than the one before it, a step growing faster than its FLOPs."""
    faults = sorted({t.busy_note for _, _, t in line if t.busy_note})
    faults += [f"{name} {x:,}'s steps spread {t.spread:.0%} of their median (a usable point: at "
              f"most {MAX_SPREAD:.0%})" for x, _, t in line if t.spread > MAX_SPREAD]
    faults += [f"{name} {x:,}'s steps had a CPU for {t.cpu_share:.0%} of their time (a usable point: "
               f"at least {MIN_CPU_SHARE:.0%}; other work held the cores)" for x, _, t in line
               if t.cpu_share is not None and t.cpu_share < MIN_CPU_SHARE]
    for (x0, f0, t0), (x1, f1, t1) in zip(line, line[1:]):
        if t1.q3_s < t0.q1_s:
            faults.append(f"{name} {x1:,} ({t1.median_s * 1e3:.3g} ms) ran faster than {name} "
                          f"{x0:,} ({t0.median_s * 1e3:.3g} ms)")
        elif t1.q1_s > t0.q3_s * MAX_GROWTH * f1 / f0:
            ratio = t1.median_s / t0.median_s
            faults.append(f"{name} {x1:,} ({t1.median_s * 1e3:.3g} ms) took "
                          f"{f'{ratio:.3g}' if ratio < 1000 else f'{ratio:,.0f}'} times {name} {x0:,} "
                          f"({t0.median_s * 1e3:.3g} ms) for {f1 / f0:.3g} times the FLOPs")
    (x0, f0, t0), (x1, f1, t1) = line[0], line[-1]
    if len(line) > 1 and t1.median_s / t0.median_s < (f1 / f0) ** 0.5:
        faults.append(f"from {name} {x0:,} to {x1:,} the step grew {t1.median_s / t0.median_s:.3g} times "
                      f"for {f1 / f0:.3g} times the FLOPs (a quiet machine's: at least "
                      f"{(f1 / f0) ** 0.5:.3g} times)")
    return faults
