"""Notebook 03: what is in the compile-cache key, moving the cache with NEURON_CC_FLAGS."""
from __future__ import annotations

from pathlib import Path

from helpers.checks.exercises.feedback import NOT_YET, RIGHT, WRONG, Feedback
from mnist_mlp.common.neuron_cc_flags import ENV_VAR, FlagsError, get_flag

# True: the change gives the graph another hash, another compiler or other flags: a cache miss.
CACHE_KEY_ANSWERS = {
    "batch size 32 -> 64": (True, "the input shape is part of the graph (f32[64,784])"),
    "learning rate 0.01 -> 0.02": (False, "the learning rate reaches the graph as a scalar input, "
                                   "not baked in (notebook 03: the step at 0.05 met no new graph)"),
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
    from helpers.cache.location import CompileCacheError, locate_cache

    name = "Exercise 03.2 (move the cache with NEURON_CC_FLAGS)"
    hint = (f"the cache wrapper reads its directory from --cache_dir=<dir> in {ENV_VAR}: add "
            "it to the string already there (a space between flags).")
    try:
        location = locate_cache(env)
        kept = {flag: get_flag(env.get(ENV_VAR), flag) for flag in keep}
    except (CompileCacheError, FlagsError) as err:
        return Feedback(name, WRONG, f"{ENV_VAR} does not parse: {err}", hint)
    lost = [flag for flag, value in keep.items() if kept[flag] != value]
    if location.remote or location.path is None or Path(location.path) != Path(wanted_dir):
        return Feedback(name, NOT_YET if get_flag(env.get(ENV_VAR), "--cache_dir") is None
                        else WRONG, f"the next run would use {location.url} (from "
                        f"{location.source}), not {wanted_dir}.", hint)
    if lost:
        return Feedback(name, WRONG, f"the cache moves, but {', '.join(lost)} was lost on the way.",
                        hint)
    return Feedback(name, RIGHT, f"{ENV_VAR}={env[ENV_VAR]!r}: the cache moves to "
                    f"{wanted_dir} and your other flags stay.")
