"""The check cells of the exercises at the end of notebooks 01-05.

Each check measures the truth itself (a real loader, real compile counts, real BF16 arithmetic)
and returns Feedback: "Not yet" with a hint while the exercise is untouched (the committed
state), "Not quite" with a hint when the answer is wrong, "Correct" with why. A check never
raises on a learner's answer, so an unfinished exercise never stops Run All.
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass
from pathlib import Path

NOT_YET, WRONG, RIGHT = "Not yet", "Not quite", "Correct"
_COLOURS = {NOT_YET: "#57606a", WRONG: "#9a6700", RIGHT: "#1a7f37"}


@dataclass(frozen=True)
class Feedback:
    exercise: str
    verdict: str  # NOT_YET, WRONG or RIGHT
    message: str
    hint: str = ""

    @property
    def ok(self) -> bool:
        return self.verdict == RIGHT

    def __str__(self) -> str:
        text = f"{self.exercise} - {self.verdict}: {self.message}"
        return text + (f"\nHint: {self.hint}" if self.hint and not self.ok else "")

    __repr__ = __str__

    def _repr_html_(self) -> str:
        colour = _COLOURS[self.verdict]
        hint = (f"<div><b>Hint:</b> {html.escape(self.hint)}</div>"
                if self.hint and not self.ok else "")
        return (f'<div style="border-left:6px solid {colour};padding:4px 10px">'
                f'<b>{html.escape(self.exercise)}</b> · <b style="color:{colour}">{self.verdict}</b>: '
                f'{html.escape(self.message)}{hint}</div>')


def _number(value) -> float | None:
    """The learner's answer as a number, or None when it is not one (still a placeholder)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _judge_steps(name: str, predicted, measured: int, hint: str, *, right: str,
                 wrong: str) -> Feedback:
    """A predicted step count against the measured one."""
    guess = _number(predicted)
    if guess is None:
        return Feedback(name, NOT_YET, "set predicted_steps to your prediction, then run this cell.",
                        hint)
    if guess == measured:
        return Feedback(name, RIGHT, right)
    return Feedback(name, WRONG, f"you said {predicted}; {wrong}.", hint)


# --------------------------------------------------------------------------- 01 · CPU

def check_steps_per_epoch(predicted, batch_size: int, data_dir=None) -> Feedback:
    """01, exercise 1: training steps in one epoch at `batch_size`, measured on the real loader."""
    from mnist_mlp.data import TRAIN_IMAGES, make_loader

    name = "Exercise 01.1 (steps per epoch)"
    loader = make_loader("fast", data_dir, train=True, batch_size=batch_size, seed=0)
    measured = len(loader)
    hint = (f"{TRAIN_IMAGES:,} training images in batches of {batch_size}; the last batch may be "
            "short (the CPU loader keeps it): round up.")
    ragged = TRAIN_IMAGES % batch_size
    tail = f" (the last one holds {ragged} images)" if ragged else ""
    return _judge_steps(name, predicted, measured, hint,
                        right=f"{measured} steps of up to {batch_size} images{tail}.",
                        wrong="len(loader) is different")


ONE_BATCH_TARGET = 0.05


def check_memorised_one_batch(final_loss: float, lr) -> Feedback:
    """01, exercise 2: the loss on one repeated batch after the loop, below ONE_BATCH_TARGET."""
    name = "Exercise 01.2 (memorise one batch)"
    hint = ("0.01 is tuned for 7,500 steps over many batches; 50 steps on one batch need "
            "bigger ones. Try 10x, 30x, 100x, 200x - and look at what happens when it is too big.")
    if lr == 0.01:
        return Feedback(name, NOT_YET, f"with lr = 0.01 the loss is still {final_loss:.2f}: "
                        "change lr in the cell above and run it again.", hint)
    if math.isnan(final_loss) or final_loss >= ONE_BATCH_TARGET:
        too_big = math.isnan(final_loss) or (_number(lr) or 0) > 1.5
        why = " The steps overshoot: the loss jumps around or blows up." if too_big else ""
        return Feedback(name, WRONG, f"lr = {lr} ends at loss {final_loss:.3f}, above "
                        f"{ONE_BATCH_TARGET}.{why}", hint)
    return Feedback(name, RIGHT, f"lr = {lr} takes the loss to {final_loss:.4f}: the model can "
                    "memorise 32 images. A training loop that cannot do this has a bug; one that "
                    "only does this has learned nothing general.")


# --------------------------------------------------------------------------- 02 · XLA

def _compiled_labels(rows) -> list[str]:
    return [row["label"] for row in rows if row.get("UncachedCompile", 0) > 0]


def check_graph_count(predicted, rows) -> Feedback:
    """02, exercise 1: how many new graphs the recorded steps compiled (CompileMetricsRecorder rows)."""
    name = "Exercise 02.1 (predict the graph count)"
    compiled = _compiled_labels(rows)
    hint = ("a graph is compiled once per new input shape; a shape this kernel has compiled "
            "before (earlier in the notebook) costs nothing.")
    guess = _number(predicted)
    if guess is None:
        return Feedback(name, NOT_YET, "set predicted_graphs to your prediction, then run the cell.",
                        hint)
    where = ", ".join(compiled) if compiled else "none"
    if guess == len(compiled):
        return Feedback(name, RIGHT, f"{len(compiled)} new graph(s), at: {where}. Every other "
                        "step reused a graph already compiled in this kernel.")
    return Feedback(name, WRONG, f"you said {predicted}; the steps that compiled were: {where}.",
                    hint)


SETTLED_AFTER = 2  # steps a fixed-shape loop may still compile in (its first values are constants)


def check_recompile_trigger(rows) -> Feedback:
    """02, exercise 2: once the loop has settled (from step SETTLED_AFTER on), no step compiles."""
    name = "Exercise 02.2 (find the recompile trigger)"
    if len(rows) <= SETTLED_AFTER:
        return Feedback(name, NOT_YET, f"run the loop above first: it should record more than "
                        f"{SETTLED_AFTER} steps.")
    compiled = _compiled_labels(rows)
    settled = _compiled_labels(rows[SETTLED_AFTER:])
    if settled:
        verdict = NOT_YET if len(compiled) == len(rows) else WRONG
        return Feedback(name, verdict, f"{len(compiled)} of {len(rows)} steps compiled a new graph "
                        f"({', '.join(compiled)}).",
                        "print the shape of every tensor the loop keeps from step to step. Which "
                        "one grows? Keep one value of fixed shape instead, updated at each step "
                        "(a running sum, or an exponential mean).")
    return Feedback(name, RIGHT, f"from step {SETTLED_AFTER} on every step reuses one graph: what "
                    "the loop keeps on the device has the same shape at every step. (The first "
                    "steps may still compile: a tensor that starts as a constant, e.g. zeros, "
                    "becomes device data after the first sync.)")


# --------------------------------------------------------------------------- 03 · compile cache

# True: the change gives the graph another hash, another compiler or other flags: a cache miss.
CACHE_KEY_ANSWERS = {
    "batch size 32 -> 64": (True, "the input shape is part of the graph (f32[64,784])"),
    "learning rate 0.01 -> 0.02": (False, "the learning rate reaches the graph as a scalar input, "
                                   "not baked in (notebook 02: no step recompiled when it changed)"),
    "4 epochs -> 1 epoch": (False, "the step graph is the same; only how often it runs changes"),
    "seed 0 -> 1": (False, "the seed changes the weights' values, which are inputs, not the graph"),
    "NEURON_CC_FLAGS gains --model-type=transformer": (True, "compiler flags are part of the key"),
    "a newer neuronx-cc": (True, "each compiler version has its own cache directory"),
}


def check_cache_key(answers: dict) -> Feedback:
    """03, exercise 1: which changes make the next run miss the persistent cache."""
    name = "Exercise 03.1 (what is in the cache key)"
    hint = ("the key is the graph (its operations and shapes), the compiler flags and the "
            "compiler version: ask of each change whether it touches one of those.")
    missing = [k for k in CACHE_KEY_ANSWERS if not isinstance(answers.get(k), bool)]
    if missing:
        return Feedback(name, NOT_YET, f"{len(missing)} of {len(CACHE_KEY_ANSWERS)} still None: "
                        "answer each with True (a cache miss) or False.", hint)
    wrong = [k for k, (truth, _) in CACHE_KEY_ANSWERS.items() if answers[k] != truth]
    if wrong:
        return Feedback(name, WRONG, f"{len(wrong)} wrong: " + "; ".join(wrong) + ".", hint)
    why = "; ".join(f"{k}: {why}" for k, (_, why) in CACHE_KEY_ANSWERS.items())
    return Feedback(name, RIGHT, why + ".")


def check_cache_dir_flag(env: dict, wanted_dir: str, keep: dict[str, str]) -> Feedback:
    """03, exercise 2: env's NEURON_CC_FLAGS puts the cache in wanted_dir and keeps the flags in keep."""
    from helpers.cache import flags as cache_flags
    from helpers.cache.location import CompileCacheError, locate_cache

    name = "Exercise 03.2 (move the cache with NEURON_CC_FLAGS)"
    hint = (f"the cache wrapper reads its directory from --cache_dir=<dir> in {cache_flags.ENV_VAR}: add "
            "it to the string already there (a space between flags).")
    try:
        location = locate_cache(env)
        kept = {flag: cache_flags.get_flag(env.get(cache_flags.ENV_VAR), flag) for flag in keep}
    except (CompileCacheError, cache_flags.FlagsError, ValueError) as err:
        return Feedback(name, WRONG, f"{cache_flags.ENV_VAR} does not parse: {err}", hint)
    lost = [flag for flag, value in keep.items() if kept[flag] != value]
    if location.remote or location.path is None or Path(location.path) != Path(wanted_dir):
        return Feedback(name, NOT_YET if cache_flags.get_flag(env.get(cache_flags.ENV_VAR), "--cache_dir") is None
                        else WRONG, f"the next run would use {location.url} (from "
                        f"{location.source}), not {wanted_dir}.", hint)
    if lost:
        return Feedback(name, WRONG, f"the cache moves, but {', '.join(lost)} was lost on the way.",
                        hint)
    return Feedback(name, RIGHT, f"{cache_flags.ENV_VAR}={env[cache_flags.ENV_VAR]!r}: the cache moves to "
                    f"{wanted_dir} and your other flags stay.")


# --------------------------------------------------------------------------- 04 · torchrun

def check_torchrun_standalone(torchrun_args) -> Feedback:
    """04, exercise 1: torchrun arguments for 2 workers on one machine that let torchrun pick the
    rendezvous endpoint itself; parsed by torchrun's own argument parser."""
    from torch.distributed.run import get_args_parser

    name = "Exercise 04.1 (a launch without a port)"
    hint = ("look in `torchrun --help` for the flag meant for a single-node job: it chooses the "
            "rendezvous backend and endpoint (a free port on this machine) by itself.")
    if not isinstance(torchrun_args, (list, tuple)) or not all(isinstance(a, str) for a in torchrun_args):
        return Feedback(name, WRONG, "give a list of strings, e.g. [\"--nproc_per_node=2\", ...].",
                        hint)
    import contextlib
    import io

    try:
        with contextlib.redirect_stderr(io.StringIO()):  # argparse's usage text: not for the cell
            args = get_args_parser().parse_args(list(torchrun_args))
    except SystemExit:  # argparse's way of saying "unknown or malformed argument"
        return Feedback(name, WRONG, "torchrun's parser refuses these arguments.", hint)
    script = str(args.training_script).replace("\\", "/")
    if not script.endswith("mnist_mlp/train_torchrun.py") or str(args.nproc_per_node) != "2":
        return Feedback(name, WRONG, f"torchrun would run {script} with --nproc_per_node="
                        f"{args.nproc_per_node}; the exercise asks for 2 workers of "
                        "mnist_mlp/train_torchrun.py.", hint)
    if any("master" in a for a in torchrun_args):
        return Feedback(name, WRONG, "no --master_addr or --master_port: torchrun should choose.",
                        hint)
    picks_port = args.standalone or (args.rdzv_backend == "c10d"
                                     and str(args.rdzv_endpoint).endswith(":0"))
    if not picks_port:
        verdict = NOT_YET if list(torchrun_args) == ["--nproc_per_node=2",
                                                     "mnist_mlp/train_torchrun.py"] else WRONG
        return Feedback(name, verdict, "torchrun would use the static rendezvous on the default "
                        f"port {args.master_port}: a second job on this machine would collide.",
                        hint)
    return Feedback(name, RIGHT, "torchrun sets up a c10d rendezvous on localhost with a free "
                    "port itself (--standalone: single-node jobs only), so two jobs on one "
                    "machine never fight over a port.")


def check_distributed_sampler(sampler, rank2_items) -> Feedback:
    """04, exercise 2: torch's DistributedSampler over 10 items for rank 2 of 3, no shuffle, and
    what it yields: it pads the indices to a multiple of the worker count by repeating the first
    ones, so some item is seen twice per epoch."""
    from torch.utils.data.distributed import DistributedSampler

    name = "Exercise 04.2 (torch's own sampler)"
    hint = ("DistributedSampler(dataset, num_replicas=..., rank=..., shuffle=...) needs no process "
            "group when num_replicas and rank are given; any 10-item sequence is a dataset here. "
            "Then list(sampler).")
    if sampler is None and rank2_items is None:
        return Feedback(name, NOT_YET, "no sampler yet.", hint)
    if not isinstance(sampler, DistributedSampler):
        return Feedback(name, WRONG, f"sampler is a {type(sampler).__name__}, not a "
                        "torch.utils.data.distributed.DistributedSampler.", hint)
    settings = (len(sampler.dataset), sampler.num_replicas, sampler.rank, sampler.shuffle)
    if settings != (10, 3, 2, False) or sampler.drop_last:
        return Feedback(name, WRONG, f"this sampler has {settings[0]} items, num_replicas="
                        f"{settings[1]}, rank={settings[2]}, shuffle={settings[3]}, drop_last="
                        f"{sampler.drop_last}; the exercise asks for 10, 3, 2, False, False.", hint)
    truth = list(sampler)
    try:
        given = [int(i) for i in rank2_items]
    except (TypeError, ValueError):
        return Feedback(name, WRONG, "rank2_items should be the list of indices the sampler "
                        "gives: list(sampler).", hint)
    if given != truth:
        return Feedback(name, WRONG, f"{given} is not what this sampler gives rank 2.", hint)
    return Feedback(name, RIGHT, f"rank 2 gets {truth}: 10 items do not divide by 3, so the "
                    "sampler pads the list to 12 by repeating items 0 and 1, and rank 2 takes item "
                    "1, which rank 1 also trains on. Every rank gets 4 items, the same number of "
                    "steps; this workbook's sampler drops instead of repeating.")


# --------------------------------------------------------------------------- 05 · BF16

def largest_surviving_exponent() -> int:
    """The largest k for which 1 + 2**-k is still above 1 in BF16 (round to nearest)."""
    import torch

    one = torch.tensor(1.0, dtype=torch.bfloat16)
    return max(k for k in range(1, 30) if (one + 2.0 ** -k).item() > 1.0)


def check_bf16_smallest_update(k) -> Feedback:
    """05, exercise 1: the smallest power-of-two step that still changes 1.0 in BF16."""
    name = "Exercise 05.1 (the smallest update BF16 keeps at 1.0)"
    truth = largest_surviving_exponent()
    hint = ("BF16 keeps 8 significant bits: work out how far apart its values are just above "
            "1.0. A sum exactly half way between two of them rounds to the 'even' one.")
    guess = _number(k)
    if guess is None:
        return Feedback(name, NOT_YET, "set smallest_surviving_k, then run this cell.", hint)
    if guess == truth:
        return Feedback(name, RIGHT, f"2**-{truth} = {2.0 ** -truth:g} is the smallest power of two "
                        f"that moves 1.0; lr 0.01 x a gradient of 0.1 is 0.001 < 2**-{truth + 1}: "
                        "with round-to-nearest such an update to a weight near 1 is lost.")
    return Feedback(name, WRONG, f"with k = {k}, 1 + 2**-{k} in BF16 is "
                    f"{'above' if guess < truth else 'exactly'} 1.0; look for the edge.", hint)


def repeated_small_adds(steps: int = 1000, k: int = 9, seed: int = 0) -> dict[str, float]:
    """1.0 plus 2**-k, `steps` times, kept in BF16: round to nearest vs stochastic rounding."""
    import torch

    from mnist_mlp.precision import stochastic_round_to_bf16

    generator = torch.Generator().manual_seed(seed)
    nearest = torch.tensor(1.0, dtype=torch.bfloat16)
    stochastic = torch.tensor(1.0, dtype=torch.bfloat16)
    for _ in range(steps):
        nearest = (nearest.float() + 2.0 ** -k).to(torch.bfloat16)
        total = stochastic.float() + 2.0 ** -k
        stochastic = stochastic_round_to_bf16(total, torch.rand(total.shape, generator=generator))
    return {"nearest": nearest.item(), "stochastic": stochastic.item(),
            "exact": 1.0 + steps * 2.0 ** -k}


def check_repeated_small_adds(predicted_nearest, predicted_stochastic) -> Feedback:
    """05, exercise 2: predict both results of repeated_small_adds() (the stochastic one to 10 %)."""
    name = "Exercise 05.2 (a thousand tiny updates)"
    measured = repeated_small_adds()
    hint = ("2**-9 is a quarter of BF16's step at 1.0. Round-to-nearest drops it every time; "
            "stochastic rounding rounds up with probability 1/4, so on average it adds it.")
    a, b = _number(predicted_nearest), _number(predicted_stochastic)
    if a is None or b is None:
        return Feedback(name, NOT_YET, "set both predictions, then run this cell.", hint)
    if a == measured["nearest"] and abs(b - measured["exact"]) <= 0.1 * measured["exact"]:
        return Feedback(name, RIGHT, f"round-to-nearest stays at {measured['nearest']:g}; "
                        f"stochastic rounding reaches {measured['stochastic']:.3g} (exact sum "
                        f"{measured['exact']:.4g}). That is why BF16 training needs stochastic "
                        "rounding or FP32 master weights.")
    return Feedback(name, WRONG, f"you said {predicted_nearest} and {predicted_stochastic}.", hint)


# --------------------------------------------------------------------------- 06 · inside a run


def check_compile_counters(compiles, compile_seconds) -> Feedback:
    """06, exercise 1: the graphs this process compiled and their total compile time, read from
    torch_xla.debug.metrics' CompileTime metric (samples, total nanoseconds)."""
    import torch_xla.debug.metrics as met

    name = "Exercise 06.1 (read the compile counters)"
    data = met.metric_data("CompileTime")
    samples, total_s = (data[0], data[1] / 1e9) if data else (0, 0.0)
    hint = ("met.metric_data('CompileTime') returns (number of samples, total in nanoseconds, "
            "...): one sample per graph compiled.")
    count, seconds = _number(compiles), _number(compile_seconds)
    if count is None or seconds is None:
        return Feedback(name, NOT_YET, "set compiles and compile_seconds, then run this cell.", hint)
    if count == samples and abs(seconds - total_s) <= max(0.01, 0.02 * total_s):
        return Feedback(name, RIGHT, f"{samples} graphs, {total_s:.2f} s of compiling in this "
                        "process. On a trn1 each of those graphs was a neuronx-cc run, or a "
                        "compile-cache hit.")
    return Feedback(name, WRONG, f"you said {compiles} graphs and {compile_seconds} s.", hint)


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


# --------------------------------------------------------------------------- 07 · when a core wins

def check_step_flops(predicted, batch: int, widths: tuple[int, ...]) -> Feedback:
    """07, exercise 1: the FLOPs of one training step's matrix products for MLP(layers=widths)."""
    from helpers.inside.payoff import matmul_flops

    name = "Exercise 07.1 (count a step's FLOPs)"
    exact = matmul_flops(batch, widths)
    hint = ("for each nn.Linear (in_features, out_features): forward 2·batch·in·out; backward the "
            "weight gradient (the same) and the input gradient (the same again, except for the "
            "first layer, whose input is the images).")
    guess = _number(predicted)
    if guess is None:
        return Feedback(name, NOT_YET, "set step_flops, then run this cell.", hint)
    if guess == exact:
        return Feedback(name, RIGHT, f"{exact / 1e9:.2f} GFLOP per step: at a NeuronCore's FP32 "
                        f"peak about {exact / 23.75e12 * 1e6:.0f} µs, still small beside the fixed "
                        "cost of about 5 ms.")
    if abs(guess - exact) / exact < 0.2:
        return Feedback(name, WRONG, f"{guess:,.0f} is within 20 %, not exact.", hint)
    return Feedback(name, WRONG, f"you said {predicted}.", hint)
