"""Checks in every notebook: `check()` below, the expected values per backend and the exercises'
checks. No other package imports it.

Modules: expected (every backend-dependent value, keyed by backend), exercises/ (the exercises'
checks, one module per notebook or pair).

Imports: mnist_mlp, helpers.cache and helpers.inside.

One-line checks for the notebooks: print what holds, in words a learner reads, or raise.

A notebook cell ends with `check("test accuracy", results.test_accuracy, ">=", 0.92)` instead of
an `assert`: it prints `✓ test accuracy 0.93 ≥ 0.92` and raises `CheckFailed` (an
AssertionError, so nbval and Run All stop on it) with `✗ …` and the hint when it does not hold.
Expected values come from helpers/checks/expected.py, never a literal measured on one backend.

A measured float is printed to the hundredth, or to its bound's last decimal place where the bound
is finer (`✓ test accuracy 0.93 ≥ 0.92`, `✓ replicas' difference 0 ≤ 1e-06`): the comparison uses
the full value, but the kind of CPU (AVX-512 kernels or AVX2 ones) and PyTorch's thread count move
a test accuracy or a loss in its fourth decimal (0.9306 against 0.9305), and a committed output
must read the same on every x86-64 CPU. Less than one step of that resolution reads as zero
(an accuracy gap of 0.0042 and one of 0.0058 both print 0.00 ≤ 0.01). A bound computed from a
measurement (more than four significant digits, e.g. the first loss / 3) is printed the same
way; a bound as written stays as written.
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


# Measured floats in a check print to this resolution (or their bound's, when finer): coarser than
# what a CPU kind or a thread count changes (a test accuracy's or a loss's fourth decimal).
RESOLUTION_DECIMALS = 2
# Comparisons whose value is a measurement shown at that resolution; == and != show it whole.
_MEASURED_OPERATORS = {">=", ">", "<=", "<", "between"}


def written_decimals(bound) -> int | None:
    """The decimal places a bound is written with (0.92: 2, 1e-06: 6, 30: 0), or None for a
    float with more than four significant digits, which was computed from a measurement."""
    if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not math.isfinite(bound):
        return None
    if isinstance(bound, int):
        return 0
    mantissa, _, exponent = repr(bound).partition("e")
    if len(mantissa.lstrip("-").replace(".", "").strip("0")) > 4:
        return None
    return max(0, len(mantissa.partition(".")[2].rstrip("0")) - int(exponent or 0))


def show_measured(value: float, decimals: int) -> str:
    """A measured float rounded to `decimals` places (never to more than four significant
    digits): fixed places to the thousandth (0.00, 0.93), finer ones as show() prints them. Less
    than one step of that resolution reads as zero, not half of them: a gap that is 0.0042 on one
    CPU and 0.0058 on another prints 0.00 on both."""
    if not math.isfinite(value):
        return show(value)
    if abs(value) < 10.0 ** -decimals:
        value = 0.0
    if value:
        decimals = min(decimals, max(0, 3 - math.floor(math.log10(abs(value)))))
    rounded = round(value, decimals) + 0.0  # + 0.0: no "-0.00"
    if decimals > 3:
        return show(rounded)
    return f"{rounded:,.{decimals}f}" if abs(rounded) >= 1000 else f"{rounded:.{decimals}f}"


def _shown_pair(value, expected, op) -> tuple[str, str]:
    """The value and the bound as a check prints them (see the module docstring)."""
    bounds = expected if op == "between" else (expected,)
    if op not in _MEASURED_OPERATORS or isinstance(value, bool) or not isinstance(value, float):
        return show(value), _show_bounds(bounds, op, None)
    written = [written_decimals(b) for b in bounds]
    decimals = max([RESOLUTION_DECIMALS, *(d for d in written if d is not None)])
    return show_measured(value, decimals), _show_bounds(bounds, op, decimals)


def _show_bounds(bounds, op, decimals) -> str:
    shown = [show_measured(b, decimals) if decimals is not None and isinstance(b, float)
             and written_decimals(b) is None else show(b) for b in bounds]
    return f"[{shown[0]}, {shown[1]}]" if op == "between" else shown[0]


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
        yes, no = "in", "outside"
    elif op in _OPERATORS:
        compare, yes, no = _OPERATORS[op]
        holds = bool(compare(value, expected))
    else:
        raise ValueError(f"check({label!r}): unknown operator {op!r}; use one of "
                         f"{', '.join(_OPERATORS)} or 'between'")
    value_text, bound_text = _shown_pair(value, expected, op)
    shown = f"{value_text}{unit} {yes} {bound_text}{unit}"
    failed = f"{value_text}{unit} {no} {bound_text}{unit}"
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
