"""helpers/inside/robust_timing.py: a point's steps as a median and IQR with the slow ones
rejected, timed in rounds across the points, and the shape a line must have to place a crossing.
Fake clocks make every time exact: a step slowed on purpose is a known number of seconds."""
import pytest

from helpers.inside.robust_timing import (
    MAX_SPREAD,
    Timing,
    flag_slower_than_more_work,
    line_faults,
    summarize,
    time_interleaved,
)


class FakeClock:
    """A clock that only moves when a step says so: each step adds its seconds."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def stepper(clock, seconds_by_call, log=None, name=None):
    """A step whose n-th call takes seconds_by_call(n) on the fake clock."""
    calls = []

    def step():
        calls.append(1)
        if log is not None:
            log.append(name)
        clock.now += seconds_by_call(len(calls))
    return step


def test_a_slow_step_is_rejected_and_leaves_the_median():
    times = [0.010, 0.011, 0.009, 0.010, 0.012, 0.010, 0.500]  # one step slowed 50-fold
    t = summarize(times)
    assert t.rejected == 1 and t.kept == 6
    assert t.median_s == pytest.approx(0.010)
    assert t.q1_s == pytest.approx(0.010) and t.q3_s == pytest.approx(0.01075)
    assert t.reliable and t.spread == pytest.approx(0.075)
    # the rule is 3 scaled MADs: median 0.010, MAD 0.0005 -> 3 * 1.4826 * 0.0005 = 0.00222 s away
    assert summarize([0.010, 0.0105, 0.0095, 0.010, 0.0122]).rejected == 0
    assert summarize([0.010, 0.0105, 0.0095, 0.010, 0.0123]).rejected == 1


def test_a_point_spread_wider_than_the_limit_is_unreliable():
    spread = summarize([0.010, 0.030, 0.015, 0.035, 0.012, 0.028])
    assert spread.rejected == 0 and spread.spread > MAX_SPREAD and not spread.reliable
    with pytest.raises(ValueError, match="at least 2"):
        summarize([0.01])


def test_steps_are_timed_in_rounds_across_the_points_and_a_slowed_step_is_rejected():
    clock, order = FakeClock(), []
    tick = 2.0 ** -10  # about 1 ms, exact in binary: the sums below are exact
    # point "a": one tick a step, its 9th call (a timed one) slowed to 256 ticks; "b": 32 ticks
    steps = {"a": stepper(clock, lambda n: 256 * tick if n == 9 else tick, order, "a"),
             "b": stepper(clock, lambda n: 32 * tick, order, "b")}
    timed = time_interleaved(steps, rounds=3, warmup=2, min_visit_s=5 * tick, clock=clock)
    # warm-up: 2 each. Each round visits a until the visit lasts 5 ticks, then b once (32 >= 5):
    # round 2's visit of a ends at the slowed step, its 2nd
    assert order == ["a"] * 2 + ["b"] * 2 + ["a"] * 5 + ["b"] + ["a"] * 2 + ["b"] + ["a"] * 5 + ["b"]
    assert timed["b"] == Timing(32 * tick, 32 * tick, 32 * tick, 3, 0)
    assert timed["a"] == Timing(tick, tick, tick, 11, 1)  # the slowed step rejected


def quiet(ms, spread=0.04):
    return Timing(ms / 1e3, ms / 1e3 * (1 - spread / 2), ms / 1e3 * (1 + spread / 2), 20, 0, cpu_share=1.9)


def test_a_line_a_quiet_machine_draws_has_no_fault():
    line = [(32, 1e6, quiet(0.5)), (128, 4e6, quiet(0.7)), (512, 16e6, quiet(1.8)), (2048, 64e6, quiet(6.3))]
    assert line_faults(line, "batch") == []


def test_a_busy_point_breaks_the_lines_shape():
    line = [(32, 1e6, quiet(0.5)), (128, 4e6, quiet(128.0)), (512, 16e6, quiet(2.1))]
    faults = line_faults(line, "batch")
    assert faults == ["batch 128 (128 ms) took 256 times batch 32 (0.5 ms) for 4 times the FLOPs",
                      "batch 512 (2.1 ms) ran faster than batch 128 (128 ms)"]
    # within their spreads a point may be a little faster than the one before it
    assert line_faults([(32, 1e6, quiet(1.0, 0.2)), (128, 4e6, quiet(0.95, 0.2)), (2048, 64e6, quiet(9.0))],
                       "batch") == []
    wide = [(32, 1e6, quiet(0.5)), (128, 4e6, quiet(1.0, spread=0.6))]
    assert line_faults(wide, "batch") == ["batch 128's steps spread 60% of their median (a usable point: at most 50%)"]


def test_a_step_may_grow_up_to_twice_as_fast_as_its_flops():
    # 4 times the FLOPs: up to 8 times the time is a quiet machine's (larger matrices leave the caches)
    assert line_faults([(2048, 4e6, quiet(10.0, 0)), (4096, 16e6, quiet(79.0, 0))], "width") == []
    assert line_faults([(2048, 4e6, quiet(10.0, 0)), (4096, 16e6, quiet(81.0, 0))], "width") == [
        "width 4,096 (81 ms) took 8.1 times width 2,048 (10 ms) for 4 times the FLOPs"]


def test_steps_that_waited_for_a_cpu_are_unreliable_however_steady():
    clock, cpu = FakeClock(), FakeClock()

    def step():  # 1 ms of work, 9 ms waiting while other work holds the CPU
        cpu.now += 0.001
        clock.now += 0.010
    waited = time_interleaved({"a": step}, rounds=3, warmup=1, min_visit_s=0, clock=clock,
                              cpu_clock=cpu)["a"]
    assert waited.spread < 1e-9 and waited.cpu_share == pytest.approx(0.1) and not waited.reliable
    assert line_faults([(32, 1e6, waited)], "batch") == [
        "batch 32's steps had a CPU for 10% of their time (a usable point: at least 90%; other work "
        "held the cores)"]
    # two threads busy all along: twice the wall time, reliable
    assert summarize([0.01, 0.01, 0.01], [0.02, 0.02, 0.02]).cpu_share == pytest.approx(2.0)
    assert summarize([0.01, 0.01, 0.01], [0.02, 0.02, 0.02]).reliable
    # the limit: its own thread on a CPU 90% of the time
    assert not summarize([0.01, 0.01], [0.0085, 0.0085]).reliable
    assert summarize([0.01, 0.01], [0.0095, 0.0095]).reliable
    # without a CPU clock (a device does the work) nothing is said of it
    assert summarize([0.01, 0.01]).cpu_share is None and summarize([0.01, 0.01]).reliable


def test_a_line_flattened_by_waiting_is_a_busy_machines():
    # every step 136 ms, a little more for the largest: 256 times the FLOPs, twice the time
    flat = [(32, 1e6, quiet(136.0)), (512, 16e6, quiet(200.0)), (8192, 256e6, quiet(272.0))]
    assert line_faults(flat, "batch") == [
        "from batch 32 to 8,192 the step grew 2 times for 256 times the FLOPs (a quiet machine's: at "
        "least 16 times)"]
    assert line_faults([(32, 1e6, quiet(0.48)), (8192, 256e6, quiet(7.7))], "batch") == []
    assert line_faults([(32, 1e6, quiet(0.48)), (8192, 256e6, quiet(7.6))], "batch") != []


def test_a_point_slower_than_one_doing_more_work_is_marked_busy():
    # notebook 07 on a loaded machine: batch 32 at 131 ms, steady (3 %), on a CPU all along
    timed = {32: quiet(131.0), 128: quiet(0.81), 512: quiet(2.0), 2048: quiet(130.0, 0)}
    flagged = flag_slower_than_more_work(timed, lambda a, b: b > a, name=lambda b: f"batch {b}")
    assert flagged[32].busy_note == "batch 32 (131 ms) took longer than batch 128 (0.81 ms), which does more work (other work slowed it)"
    assert not flagged[32].reliable and all(flagged[b].reliable for b in (128, 512, 2048))
    assert "batch 32 (131 ms) took longer" in line_faults([(b, 4 ** i, t) for i, (b, t) in enumerate(flagged.items())],
                                                          "batch")[0]
    # within both spreads a point may be a little slower than a larger one
    close = {32: quiet(1.0, 0.2), 128: quiet(0.95, 0.2)}
    assert all(t.busy_note is None for t in flag_slower_than_more_work(close, lambda a, b: b > a).values())
