"""Notebook 07's exercise, solved."""
import sys

from torch import nn

from helpers.checks.exercises import check_step_flops
from mnist_mlp.model import MLP

# Exercise 1: per nn.Linear, forward in·out multiply-adds per image (2 FLOPs each); backward the
# weight gradient (as many) and the input gradient (as many), except the first layer's input.
batch, widths = 1024, (512, 256)
layers = [m for m in MLP(layers=widths).modules() if isinstance(m, nn.Linear)]
step_flops = sum(2 * batch * m.in_features * m.out_features * (2 if i == 0 else 3)
                 for i, m in enumerate(layers))
feedback = [check_step_flops(step_flops, batch, widths)]

for f in feedback:
    print(f)
sys.exit(0 if all(f.ok for f in feedback) else 1)
