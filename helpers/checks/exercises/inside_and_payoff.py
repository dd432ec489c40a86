"""Notebooks 06 and 07: torch_xla's compile counters, a SummaryWriter scalar, a step's FLOPs, the
batch from which a NeuronCore wins."""
from __future__ import annotations

from pathlib import Path

from helpers.checks.exercises.feedback import NOT_YET, RIGHT, WRONG, Feedback, judge_exact, number


def check_compile_counters(compiles, compile_seconds) -> Feedback:
    """06, exercise 1: the new graphs of this process and their total time, read from
    torch_xla.debug.metrics' CompileTime metric (samples, total nanoseconds)."""
    import torch_xla.debug.metrics as met

    name = "Exercise 06.1 (read the compile counters)"
    data = met.metric_data("CompileTime")
    samples, total_s = (data[0], data[1] / 1e9) if data else (0, 0.0)
    hint = ("met.metric_data('CompileTime') returns (number of samples, total in nanoseconds, "
            "...): one sample per new lazy graph (eager mode's are in EagerOpCompileTime).")
    count, seconds = number(compiles), number(compile_seconds)
    if count is None or seconds is None:
        return Feedback(name, NOT_YET, "set compiles and compile_seconds, then run this cell.", hint)
    if count == samples and abs(seconds - total_s) <= max(0.01, 0.02 * total_s):
        return Feedback(name, RIGHT, f"{samples} new lazy graphs, {total_s:.2f} s to compile or load them "
                        "in this process. On a trn1 each was a compile (a neuronx-cc run) or a "
                        "cache hit.")
    return Feedback(name, WRONG, f"you said {compiles} new graphs and {compile_seconds} s.", hint)


def check_logged_scalars(logdir, tag: str, values: list[float]) -> Feedback:
    """06, exercise 2: `tag` written at steps 0, 1, 2... with `values` into an event file in
    logdir by torch.utils.tensorboard.SummaryWriter, read back the way TensorBoard reads it."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    name = "Exercise 06.2 (log a scalar of your own)"
    hint = ("writer = SummaryWriter(logdir); writer.add_scalar(tag, value, step) for each step; "
            "writer.close() (the file is written when the writer flushes or closes).")
    events = EventAccumulator(str(logdir))
    if Path(logdir).is_dir():
        events.Reload()
    if not Path(logdir).is_dir() or tag not in events.Tags().get("scalars", []):
        return Feedback(name, NOT_YET, f"no scalar {tag!r} in {logdir} yet.", hint)
    got = [(e.step, round(e.value, 6)) for e in events.Scalars(tag)]
    want = [(step, round(v, 6)) for step, v in enumerate(values)]
    if got == want:
        return Feedback(name, RIGHT, f"{len(got)} points of {tag}: TensorBoard shows them under "
                        "its Scalars tab once it reloads the directory.")
    return Feedback(name, WRONG, f"found (step, value) {got}, expected {want}.", hint)



def check_step_flops(predicted, batch: int, widths: tuple[int, ...]) -> Feedback:
    """07, exercise 1: the FLOPs of one training step's matrix products for MLP(layers=widths)."""
    from helpers.inside.core_model import matmul_flops, peak_flops, published_throughputs, tutorial_fixed_s

    name = "Exercise 07.1 (count a step's FLOPs)"
    exact, fixed = matmul_flops(batch, widths), tutorial_fixed_s("fp32")
    low = fixed - 1 / published_throughputs()["cpu"]
    hint = ("for each nn.Linear (in_features, out_features): forward 2·batch·in·out; backward the "
            "weight gradient (the same) and the input gradient (the same again, except for the "
            "first layer, whose input is the images).")
    return judge_exact(
        name, predicted, exact, hint, variable="step_flops",
        right=(f"{exact / 1e9:.2f} GFLOP per step: at a NeuronCore's FP32 peak about "
               f"{exact / peak_flops('fp32') * 1e6:.0f} µs, still small beside the fixed cost of "
               f"{low * 1e3:.1f} to {fixed * 1e3:.1f} ms."),
        wrong=lambda guess: (f"{guess:,.0f} is within 20 %, not exact." if abs(guess - exact) < 0.2 * exact
                             else f"you said {predicted}."))


def check_core_wins_from(predicted, fixed_s: float, widths: tuple[int, ...], cpu_flops: float) -> Feedback:
    """07, exercise 2: the batch from which one NeuronCore (fixed_s plus FLOPs at its FP32 peak)
    beats a CPU that does the same FLOPs at cpu_flops, for MLP(layers=widths); within 2 %."""
    from helpers.inside.core_model import matmul_flops, peak_flops
    from helpers.inside.payoff import core_wins_from_batch

    name = "Exercise 07.2 (where does the core win?)"
    peak = peak_flops("fp32")
    truth = core_wins_from_batch(fixed_s, widths, cpu_flops, peak)
    per_image = matmul_flops(1, widths)
    hint = (f"one image is {per_image:,} FLOPs; at batch b the CPU takes b·{per_image:,}/cpu_flops "
            f"s and the core fixed_s + b·{per_image:,}/{peak:.4g} s: solve for the b where they meet.")
    guess = number(predicted)
    if guess is None:
        return Feedback(name, NOT_YET, "set core_wins_from, then run this cell.", hint)
    if truth is not None and abs(guess - truth) <= max(1.0, 0.02 * truth):
        cpu_32, core_32 = 32 * per_image / cpu_flops, fixed_s + 32 * per_image / peak
        return Feedback(name, RIGHT, (
            f"from about batch {truth:,.0f}. At batch 32 the CPU's step is {cpu_32 * 1e3:.2f} ms "
            f"against the core's {core_32 * 1e3:.2f} ms: {'the core' if cpu_32 > core_32 else 'the CPU'} "
            "wins. On a trn1, time your CPU and use your device points' batch-32 time as fixed_s."))
    return Feedback(name, WRONG, f"you said {predicted}; the lines meet elsewhere.", hint)
