"""Looking inside a run: what torch-xla compiles and runs, where a step's time goes, and when a
NeuronCore pays (notebooks 02, 03, 05-07)."""

from mnist_mlp.common.exports import lazy_exports  # noqa: E402

# What the notebooks import from this package, each loaded from its module when first asked for.
__getattr__, __all__ = lazy_exports(__name__, {
    'lazy_metrics': ['CompileMetricsRecorder', 'compiled_steps', 'describe', 'hlo_ops', 'hlo_text', 'ir_text', 'plot_compile_metrics', 'graph_hashes'],
    'tensorboard': ['scratch_directory', 'TensorBoard', 'step_names'],
    'utilization': ['UtilizationMonitor'],
    'step_time': ['StepTimeRecorder', 'plot_step_breakdown'],
    'payoff': ['TUTORIAL_WIDTHS', 'allreduce_s', 'cpu_rows', 'cpu_step_s', 'cpu_sweep', 'device_sweep', 'find_crossover', 'figure_rows', 'loader_per_image_s', 'matmul_flops', 'peak_flops', 'plot_payoff', 'published_throughputs'],
})
