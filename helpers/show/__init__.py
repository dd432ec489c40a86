"""What the notebooks display.

Modules: tables (one plain-text table formatter), plots (digit grids and loss curves), progress
(progress bars), diffs (the stage scripts side by side), stages (the stages' results side by
side), cost (time and cost per epoch).

Imports: mnist_mlp.
"""

from mnist_mlp.common.exports import lazy_exports  # noqa: E402

# What the notebooks import from this package, each loaded from its module when first asked for.
__getattr__, __all__ = lazy_exports(__name__, {
    'diffs': ['show_script_diff'],
    'stages': ['load_results', 'plot_stage_comparison'],
    'tables': ['text_table'],
    'plots': ['show_digits', 'plot_loss_curve'],
    'progress': ['tqdm'],
    'cost': ['cost_rows', 'format_cost_rows', 'load_cost_data', 'stand_in_epoch_times', 'unpriced_runs'],
})
