"""Notebooks 01 and 02: steps per epoch, memorising one batch, counting graphs, the recompile trigger."""
from __future__ import annotations

import math

from helpers.checks.exercises.feedback import NOT_YET, RIGHT, WRONG, Feedback, judge_exact, number


def check_steps_per_epoch(predicted, batch_size: int, data_dir=None) -> Feedback:
    """01, exercise 1: training steps in one epoch at `batch_size`, measured on the real loader."""
    from mnist_mlp.common.data import TRAIN_IMAGES, make_loader

    name = "Exercise 01.1 (steps per epoch)"
    loader = make_loader("fast", data_dir, train=True, batch_size=batch_size, seed=0)
    measured = len(loader)
    hint = (f"{TRAIN_IMAGES:,} training images in batches of {batch_size}; the last batch may be "
            "short (the CPU loader keeps it): round up.")
    ragged = TRAIN_IMAGES % batch_size
    tail = f" (the last one holds {ragged} images)" if ragged else ""
    return judge_exact(name, predicted, measured, hint, variable="predicted_steps",
                       right=f"{measured} steps of up to {batch_size} images{tail}.",
                       wrong=lambda guess: f"you said {predicted}; len(loader) is different.")


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
        too_big = math.isnan(final_loss) or (number(lr) or 0) > 1.5
        why = " The steps overshoot: the loss jumps around or blows up." if too_big else ""
        return Feedback(name, WRONG, f"lr = {lr} ends at loss {final_loss:.3f}, above "
                        f"{ONE_BATCH_TARGET}.{why}", hint)
    return Feedback(name, RIGHT, f"lr = {lr} takes the loss to {final_loss:.4f}: the model can "
                    "memorise 32 images. A training loop that cannot do this has a bug; one that "
                    "only does this has learned nothing general.")



def _new_graph_labels(rows) -> list[str]:
    return [row["label"] for row in rows if row.get("UncachedCompile", 0) > 0]


def check_graph_count(predicted, rows) -> Feedback:
    """02, exercise 1: how many new graphs the recorded steps met (CompileMetricsRecorder rows)."""
    name = "Exercise 02.1 (predict the graph count)"
    compiled = _new_graph_labels(rows)
    hint = ("each new input shape is a new graph, once per process; a shape this kernel has "
            "run before (earlier in the notebook) is reused.")
    guess = number(predicted)
    if guess is None:
        return Feedback(name, NOT_YET, "set predicted_graphs to your prediction, then run the cell.",
                        hint)
    where = ", ".join(compiled) if compiled else "none"
    if not compiled and guess != 0:  # the cell ran before: its shapes are not new in this kernel
        return Feedback(name, NOT_YET, "no step met a new graph: this cell already ran in this "
                        "kernel, so its shapes are not new. Restart the kernel and run all cells "
                        "to measure afresh.", hint)
    if guess == len(compiled):
        return Feedback(name, RIGHT, f"{len(compiled)} new graph(s), at: {where}. Every other "
                        "step reused a graph this kernel had already met.")
    return Feedback(name, WRONG, f"you said {predicted}; the steps with a new graph were: {where}.",
                    hint)


SETTLED_AFTER = 2  # steps a fixed-shape loop may still meet a new graph in (its first values are constants)


def check_recompile_trigger(rows) -> Feedback:
    """02, exercise 2: once the loop has settled (from step SETTLED_AFTER on), no step meets a new graph."""
    name = "Exercise 02.2 (find the recompile trigger)"
    if len(rows) <= SETTLED_AFTER:
        return Feedback(name, NOT_YET, f"run the loop above first: it should record more than "
                        f"{SETTLED_AFTER} steps.")
    compiled = _new_graph_labels(rows)
    settled = _new_graph_labels(rows[SETTLED_AFTER:])
    if settled:
        verdict = NOT_YET if len(compiled) == len(rows) else WRONG
        return Feedback(name, verdict, f"{len(compiled)} of {len(rows)} steps met a new graph "
                        f"({', '.join(compiled)}).",
                        "print the shape of every tensor the loop keeps from step to step. Which "
                        "one grows? Keep one value of fixed shape instead, updated at each step "
                        "(a running sum, or an exponential mean).")
    return Feedback(name, RIGHT, f"from step {SETTLED_AFTER} on every step reuses one graph: what "
                    "the loop keeps on the device has the same shape at every step. (The first "
                    "steps may still meet new graphs: a tensor that starts as a constant, e.g. zeros, "
                    "becomes device data after the first sync.)")
