"""Looking inside a run (notebooks 02, 03, 06, 07): torch_xla's compile and execute counters
(lazy_metrics), per-step time, TensorBoard, live utilization, Neuron Explorer's commands, and
notebook 07's CPU-against-NeuronCore measurements (payoff). Imports mnist_mlp and helpers.show."""
