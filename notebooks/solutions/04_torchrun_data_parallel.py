"""Notebook 04's exercises, solved."""
import sys

from helpers.exercises import check_steps_per_worker, check_unequal_steps

# Exercise 1: 60,000 images over 7 workers: 3 workers get 8,572, 4 get 8,571. Batches of 4
# divide 8,572 (2,143 steps) but not 8,571 (2,142 whole batches, drop_last): unequal.
# (Also: 64 workers, batch 14: 938 or 937 images each, 67 or 66 steps.)
world_size = 7
batch_size = 4
feedback = [check_unequal_steps(world_size, batch_size)]

# Exercise 2: 60,000 / 2 = 30,000 images each; 30,000 // 32 = 937 whole batches (16 dropped).
predicted_steps = 937
feedback.append(check_steps_per_worker(predicted_steps, world_size=2, batch_size=32))

for f in feedback:
    print(f)
sys.exit(0 if all(f.ok for f in feedback) else 1)
