"""Notebook 06's exercise, solved."""
import sys

from helpers.cost import epoch_seconds, load_cost_data
from helpers.exercises import check_compile_cost_in_epochs

# Exercise 1: cost = time x price for the compile and for an epoch alike, so the price cancels:
# the compile's seconds over one epoch's seconds of the published 2-worker run (937 steps per
# worker at about 163 it/s each: 5.7 s). About 33 epochs.
data = load_cost_data()
compile_s = data["published_first_compile_s"]["seconds"]
two_workers = next(run for run in data["published_runs"] if run["workers"] == 2)
epochs_per_compile = compile_s / epoch_seconds(two_workers["throughput_it_s"], two_workers["workers"])
feedback = [check_compile_cost_in_epochs(epochs_per_compile)]

for f in feedback:
    print(f)
sys.exit(0 if all(f.ok for f in feedback) else 1)
