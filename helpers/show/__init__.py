"""What the notebooks display: tables, plots, progress bars, the stages side by side."""

from mnist_mlp.common.exports import lazy_exports  # noqa: E402

# What the notebooks import from this package, each loaded from its module when first asked for.
__getattr__, __all__ = lazy_exports(__name__, {
    'diffs': ['show_script_diff'],
    'stages': ['load_results', 'plot_stage_comparison'],
    'tables': ['text_table'],
    'plots': ['show_digits', 'plot_loss_curve'],
    'progress': ['tqdm'],
    'cost': ['at_learners_rate', 'cost_rows', 'format_cost_rows', 'load_cost_data', 'stand_in_epoch_times', 'trn1_figure',
             'unpriced_runs'],
})
