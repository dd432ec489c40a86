"""Notebook 07's exercises, solved."""
import sys

from torch import nn

from helpers.checks import check_core_wins_from, check_step_flops
from helpers.inside import cpu_step_s, matmul_flops, peak_flops
from mnist_mlp.model import MLP

# Exercise 1: per nn.Linear, forward in·out multiply-adds per image (2 FLOPs each); backward the
# weight gradient (as many) and the input gradient (as many), except the first layer's input.
batch, widths = 1024, (512, 256)
layers = [m for m in MLP(layers=widths).modules() if isinstance(m, nn.Linear)]
step_flops = sum(2 * batch * m.in_features * m.out_features * (2 if i == 0 else 3)
                 for i, m in enumerate(layers))
feedback = [check_step_flops(step_flops, batch, widths)]

# Exercise 2: one image's FLOPs F (exercise 1's count at batch 1); the CPU's step is b·F/cpu_flops,
# the core's fixed_s + b·F/peak; they meet at b = fixed_s / (F/cpu_flops - F/peak).
cpu_flops = matmul_flops(512, (4096, 4096)) / cpu_step_s(512, (4096, 4096))  # as the notebook's sweep
fixed_s, widths, peak = 0.003, (1024, 1024), peak_flops("fp32")
layers = [m for m in MLP(layers=widths).modules() if isinstance(m, nn.Linear)]
per_image = sum(2 * m.in_features * m.out_features * (2 if i == 0 else 3) for i, m in enumerate(layers))
core_wins_from = fixed_s / (per_image / cpu_flops - per_image / peak)
feedback.append(check_core_wins_from(core_wins_from, fixed_s=fixed_s, widths=widths,
                                     cpu_flops=cpu_flops))

for f in feedback:
    print(f)
sys.exit(0 if all(f.ok for f in feedback) else 1)
