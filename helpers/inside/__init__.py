"""Looking inside a run (notebooks 02, 03, 06, 07).

Modules: lazy_metrics (torch_xla's compile and execute counters), step_time (where each step's
time goes), tensorboard (TensorBoard in JupyterLab), utilization (live utilization while a run
trains), neuron_explorer (Neuron Explorer's commands), payoff (notebook 07's CPU-against-
NeuronCore measurements), core_model (its model of a NeuronCore step from cited figures).

Imports: mnist_mlp, helpers.launch and helpers.show.
"""
