"""The exercises' checks, one module per notebook (or pair): each check returns a Feedback that
says Not yet / Not quite / Correct and never raises on an answer. Notebooks import a check
by name from here."""
from helpers.checks.exercises.bf16_rounding import (  # noqa: F401
    check_bf16_smallest_update,
    check_repeated_small_adds,
    largest_surviving_exponent,
    repeated_small_adds,
)
from helpers.checks.exercises.compile_cache import CACHE_KEY_ANSWERS, check_cache_dir_flag, check_cache_key  # noqa: F401
from helpers.checks.exercises.data_parallel import check_distributed_sampler, check_torchrun_standalone  # noqa: F401
from helpers.checks.exercises.feedback import HINT_LATER, NOT_YET, RIGHT, WRONG, Feedback  # noqa: F401
from helpers.checks.exercises.inside_and_payoff import (  # noqa: F401
    check_compile_counters,
    check_core_wins_from,
    check_logged_scalars,
    check_step_flops,
)
from helpers.checks.exercises.steps_and_graphs import (  # noqa: F401
    ONE_BATCH_TARGET,
    SETTLED_AFTER,
    check_graph_count,
    check_memorised_one_batch,
    check_recompile_trigger,
    check_steps_per_epoch,
)
