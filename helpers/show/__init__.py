"""What the notebooks display: tables, plots, progress bars, script diffs, the stages' results
side by side, cost per epoch. Imports mnist_mlp only."""
