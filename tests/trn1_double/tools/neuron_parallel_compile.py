"""neuron_parallel_compile as the double runs it: the command once in graph-extraction mode
(NEURON_EXTRACT_GRAPHS_ONLY=1: each new graph goes to the cache as HLO only), then every graph
it collected compiled, and the closing totals (docs/sources.md, "neuron_parallel_compile
commands")."""
import os
import subprocess
import sys
from pathlib import Path

from trn1_platform import compile_cache, rules

command = sys.argv[1:]
if not command:
    print("usage: neuron_parallel_compile <command> [args...]", file=sys.stderr)
    sys.exit(2)
trial = subprocess.run(command, env={**os.environ, "NEURON_EXTRACT_GRAPHS_ONLY": "1"})
root = rules.cache_root()
graphs, compiled = compile_cache.compile_pending(Path(root.removeprefix("file://")))
print(f"Total graphs: {graphs}")
print(f"Total successful compilations: {compiled}")
print(f"Total failed compilations: {graphs - compiled}")
sys.exit(trial.returncode)
