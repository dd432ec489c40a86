"""What the notebooks display.

Modules: tables (one plain-text table formatter), plots (digit grids and loss curves), progress
(progress bars), diffs (the stage scripts side by side), stages (the stages' results side by
side), cost (time and cost per epoch).

Imports: mnist_mlp.
"""
