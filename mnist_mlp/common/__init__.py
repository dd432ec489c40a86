"""What the four stage scripts share, kept out of the way of the lesson they teach."""

from mnist_mlp.common.exports import lazy_exports  # noqa: E402  (its own module)

# What the notebooks import from this package, each loaded from its module when first asked for.
__getattr__, __all__ = lazy_exports(__name__, {
    'cli': ['parse_args'],
    'data': ['mnist_loaders', 'make_loader'],
    'download': ['ensure_mnist'],
    'evaluation': ['evaluate', 'report_accuracy'],
    'tracking': ['StepTracker'],
    'results': ['finish_run'],
    'xla_metrics': ['read_compile_metrics'],
    'backend': ['SUPPORTED_WORKER_COUNTS', 'visible_neuron_cores'],
    'paths': ['REPO_ROOT', 'default_checkpoint_dir', 'repo_relative'],
    'observe': ['GRAPHS_TAG', 'LOSS_TAG', 'THROUGHPUT_TAG', 'ProfileWindow'],
    'precision': ['FP32MasterSGD', 'StochasticRoundingSGD', 'BF16_MODEL', 'PRECISIONS', 'parameter_bytes', 'cast_inputs_to'],
})
