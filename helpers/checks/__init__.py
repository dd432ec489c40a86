"""Checks in every notebook: `check()` below, the expected values per backend and the exercises'
checks. No other package imports it.

Modules: expected (every backend-dependent value, keyed by backend), exercises/ (the exercises'
checks, one module per notebook or pair).

Imports: mnist_mlp, helpers.cache and helpers.inside.

One-line checks for the notebooks: print what holds, in words a learner reads, or raise.

A notebook cell ends with `check("test accuracy", results.test_accuracy, ">=", 0.92)` instead of
an `assert`: it prints `✓ test accuracy 0.9305 ≥ 0.92` and raises `CheckFailed` (an
AssertionError, so nbval and Run All stop on it) with `✗ …` and the hint when it does not hold.
Expected values come from helpers/checks/expected.py, never a literal measured on one backend.
"""
from __future__ import annotations

import math
import operator

from mnist_mlp.common.platform_paths import undecidable_checks

_OPERATORS = {
    "==": (operator.eq, "=", "≠"),
    "!=": (operator.ne, "≠", "="),
    ">=": (operator.ge, "≥", "<"),
    ">": (operator.gt, ">", "≤"),
    "<=": (operator.le, "≤", ">"),
    "<": (operator.lt, "<", "≥"),
    "in": (lambda value, allowed: value in allowed, "in", "not in"),
}


class CheckFailed(AssertionError):
    """A notebook check that does not hold; its message says what was expected and what to do."""


def show(value) -> str:
    """A number as a learner reads it: 7,500 / 0.9305 / 241; a range as [lo, hi]; sets sorted."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isfinite(value) and value == int(value) and abs(value) >= 1000:
            return f"{int(value):,}"
        return f"{value:.4g}"
    if isinstance(value, range):
        return show(value.start) if len(value) == 1 else f"{show(value.start)}–{show(value.stop - 1)}"
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(show(v) for v in sorted(value)) + "}"
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value):
        return f"[{show(value[0])}, {show(value[1])}]"
    return str(value)


def check(label: str, value=True, op: str | None = None, expected=None, *,
          hint: str = "", unit: str = "") -> None:
    """Print `✓ <label> <value> <op> <expected>` when it holds; raise CheckFailed when not.

    With only a label and a truth value (`check("the reloaded model predicts the same", same)`)
    it prints the label. `op` is one of ==, !=, >=, >, <=, <, in; `between` takes a (low, high)
    pair, both ends included.

    A check the platform cannot decide (only ever on a test double of it, see
    platform_paths.undecidable_checks) prints `? <label> …: undecided` and never raises.
    """
    undecided = undecidable_checks().get(label)
    if op is None:
        if not isinstance(value, bool):
            raise TypeError(f"check({label!r}): give a truth value, or an operator and a bound")
        if undecided:
            print(f"? {label}: {'holds' if value else 'does not hold'}, undecided here ({undecided})")
            return
        if value:
            print(f"✓ {label}")
            return
        raise CheckFailed(f"✗ {label}: it does not hold" + (f". {hint}" if hint else ""))
    if op == "between":
        low, high = expected
        holds = low <= value <= high
        shown = f"{show(value)}{unit} in [{show(low)}, {show(high)}]{unit}"
        failed = f"{show(value)}{unit} outside [{show(low)}, {show(high)}]{unit}"
    elif op in _OPERATORS:
        compare, yes, no = _OPERATORS[op]
        holds = bool(compare(value, expected))
        shown = f"{show(value)}{unit} {yes} {show(expected)}{unit}"
        failed = f"{show(value)}{unit} {no} {show(expected)}{unit}"
    else:
        raise ValueError(f"check({label!r}): unknown operator {op!r}; use one of "
                         f"{', '.join(_OPERATORS)} or 'between'")
    if undecided:
        print(f"? {label} {shown if holds else failed}: undecided here ({undecided})")
        return
    if holds:
        print(f"✓ {label} {shown}")
        return
    raise CheckFailed(f"✗ {label} {failed}" + (f". {hint}" if hint else ""))


from helpers.checks.expected import expected  # noqa: E402  (the function, not its module)

__all__ = ["check", "expected", "CheckFailed"]
from mnist_mlp.common.exports import lazy_exports  # noqa: E402

# What the notebooks import from this package besides check(), each loaded when first asked for.
__getattr__, _LAZY = lazy_exports(__name__, {
    "exercises": ['check_bf16_smallest_update', 'check_cache_dir_flag', 'check_cache_key', 'check_compile_counters', 'check_core_wins_from', 'check_distributed_sampler', 'check_graph_count', 'check_logged_scalars', 'check_memorised_one_batch', 'check_recompile_trigger', 'check_repeated_small_adds', 'check_step_flops', 'check_steps_per_epoch', 'check_torchrun_standalone'],
})
