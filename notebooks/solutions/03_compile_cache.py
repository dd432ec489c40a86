"""Notebook 03's exercises, solved."""
import sys

from helpers.checks import check_cache_dir_flag, check_cache_key

# Exercise 1: the key is the graph (operations and shapes), the compiler flags, the compiler version.
changes_the_cache_key = {
    "batch size 32 -> 64": True,                              # another input shape
    "learning rate 0.01 -> 0.02": False,                      # a scalar input, not in the graph
    "4 epochs -> 1 epoch": False,                             # the same step graph, run less often
    "seed 0 -> 1": False,                                     # other weight values, same graph
    "NEURON_CC_FLAGS gains --model-type=transformer": True,   # compiler flags
    "a newer neuronx-cc": True,                               # compiler version
}
feedback = [check_cache_key(changes_the_cache_key)]

# Exercise 2: the cache wrapper's --cache_dir flag, added to the flags already there.
my_env = {"NEURON_CC_FLAGS": "--model-type=transformer"}
my_env["NEURON_CC_FLAGS"] += " --cache_dir=/tmp/classroom-cache"
feedback.append(check_cache_dir_flag(my_env, "/tmp/classroom-cache",
                                     keep={"--model-type": "transformer"}))

for f in feedback:
    print(f)
sys.exit(0 if all(f.ok for f in feedback) else 1)
