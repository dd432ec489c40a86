"""Notebook 05: BF16's smallest surviving update, repeated small adds under two roundings."""
from __future__ import annotations

from helpers.checks.exercises.feedback import NOT_YET, RIGHT, WRONG, Feedback, judge_exact, number


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
    return judge_exact(
        name, k, truth, hint, variable="largest_surviving_k",
        right=(f"2**-{truth} = {2.0 ** -truth:g} is the smallest power of two that moves 1.0; lr "
               f"0.01 x a gradient of 0.1 is 0.001 < 2**-{truth + 1}: with round-to-nearest such "
               "an update to a weight near 1 is lost."),
        wrong=lambda guess: (f"with k = {k}, 1 + 2**-{k} in BF16 is "
                             f"{'above' if guess < truth else 'exactly'} 1.0; look for the edge."))


def repeated_small_adds(steps: int = 1000, k: int = 9, seed: int = 0) -> dict[str, float]:
    """1.0 plus 2**-k, `steps` times, kept in BF16: round to nearest vs stochastic rounding."""
    import torch

    from mnist_mlp.common.precision import stochastic_round_to_bf16

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
    a, b = number(predicted_nearest), number(predicted_stochastic)
    if a is None or b is None:
        return Feedback(name, NOT_YET, "set both predictions, then run this cell.", hint)
    if a == measured["nearest"] and abs(b - measured["exact"]) <= 0.1 * measured["exact"]:
        return Feedback(name, RIGHT, f"round-to-nearest stays at {measured['nearest']:g}; "
                        f"stochastic rounding reaches {measured['stochastic']:.3g} (exact sum "
                        f"{measured['exact']:.4g}). That is why BF16 training needs stochastic "
                        "rounding or FP32 master weights.")
    return Feedback(name, WRONG, f"you said {predicted_nearest} and {predicted_stochastic}.", hint)
