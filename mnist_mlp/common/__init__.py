"""What the four stage scripts share, kept out of the way of the lesson they teach.

Modules: cli (their command line), results (the end of a run), tracking and observe (step
counting, what a run records), evaluation (test accuracy), data (the loaders), download,
mnist_files, mnist_sources and nielsen_idx (MNIST fetched and verified), backend (which device,
said in one line), distributed (the data-parallel pieces), precision (BF16), xla_metrics
(PyTorch/XLA's compile counters), compile_cache (the Neuron compile cache's location and its
entries' states), compile_notice (a long compile said in the log while it runs), atomic_files
(atomic, durable writes), child_process (the one way a process that runs beside us starts),
startup (what a process does once at its start), paths (where the workbook keeps what it
makes), platform_paths (the Neuron platform's fixed paths, the one seam a test double plugs
into), errors (errors the layers share).

Imports: mnist_mlp.model only from the package above; torch, torchvision, torch-xla,
torch-neuronx, numpy, psutil and the standard library.
"""

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
