"""Notebook 05's exercises, solved."""
import sys

from helpers.checks import check_bf16_smallest_update, check_repeated_small_adds

# Exercise 1: BF16 has 8 significant bits: next to 1.0 its values are 2**-7 apart. 1 + 2**-7
# is a BF16 value; 1 + 2**-8 lies exactly half way and rounds to even, back to 1.0.
largest_surviving_k = 7
feedback = [check_bf16_smallest_update(largest_surviving_k)]

# Exercise 2: round-to-nearest drops every 2**-9 (a quarter step): 1.0. Stochastic rounding
# rounds up a quarter of the time, so on average it adds 2**-9: about 1 + 1000/512 = 2.95.
predicted_nearest = 1.0
predicted_stochastic = 2.95
feedback.append(check_repeated_small_adds(predicted_nearest, predicted_stochastic))

for f in feedback:
    print(f)
sys.exit(0 if all(f.ok for f in feedback) else 1)
