"""Looking inside a run (notebooks 02, 03, 06, 07).

Modules: lazy_metrics (torch_xla's compile and execute counters), step_time (where each step's
time goes), tensorboard (TensorBoard in JupyterLab), utilization (live utilization while a run
trains), neuron_explorer (Neuron Explorer's commands), payoff (notebook 07's CPU-against-
NeuronCore measurements), core_model (the cited figures its model of a NeuronCore step uses),
crossover (where the two cross, placed only where the measurements allow), robust_timing (step
times as medians with their spread, outliers rejected).

Imports: mnist_mlp, helpers.launch and helpers.show.
"""

from mnist_mlp.common.exports import lazy_exports  # noqa: E402

# What the notebooks import from this package, each loaded from its module when first asked for.
__getattr__, __all__ = lazy_exports(__name__, {
    'lazy_metrics': ['CompileMetricsRecorder', 'compiled_steps', 'describe', 'hlo_ops', 'hlo_text', 'ir_text', 'plot_compile_metrics', 'graph_hashes'],
    'tensorboard': ['scratch_directory', 'TensorBoard', 'step_names'],
    'utilization': ['UtilizationMonitor'],
    'step_time': ['StepTimeRecorder', 'plot_step_breakdown'],
    'payoff': ['TUTORIAL_WIDTHS', 'allreduce_s', 'cpu_rows', 'cpu_step_s', 'cpu_sweep', 'device_sweep', 'find_crossover', 'figure_rows', 'loader_per_image_s', 'matmul_flops', 'peak_flops', 'plot_payoff', 'published_throughputs'],
})
