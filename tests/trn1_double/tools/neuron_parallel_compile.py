"""neuron_parallel_compile as its source runs it (docs/sources.md, "neuron_parallel_compile as
its source runs"), default command collect-and-compile only:

- the trial: the command with NEURON_EXTRACT_GRAPHS_ONLY=1, its output streamed and logged; a
  failed trial stops here with status 1 unless NEURON_IGNORE_TRAINING_SCRIPT_ERROR_AND_COMPILE;
- the graphs the trial's log names ("Extracting graphs (<path>)"), none: "No todo hlos found",
  no totals, status 0; else each not done and not locked compiled, then the totals;
- the exit status: the number of failed compilations.
The log prefix libneuronxla's logger adds is not in the sources; lines are printed bare.
"""
import os
import subprocess
import sys

from trn1_platform import compile_cache

command = sys.argv[1:]
if not command or command[0].startswith("--"):
    print("usage: neuron_parallel_compile <command> [args...] (the double: collect-and-compile only)",
          file=sys.stderr)
    sys.exit(2)
print("Running trial run (add option to terminate trial run early; also ignore trial run's "
      "generated outputs, i.e. loss, checkpoints)", flush=True)
log = []
try:
    with subprocess.Popen(command, env={**os.environ, "NEURON_EXTRACT_GRAPHS_ONLY": "1"},
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as trial:
        for line in trial.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            log.append(line)
    status = trial.returncode
except OSError as error:
    print(error, flush=True)
    status = -1
compile_cache.journal("trial", status=status)
if status != 0:
    print("There was an error in the training script.", flush=True)
    if not os.environ.get("NEURON_IGNORE_TRAINING_SCRIPT_ERROR_AND_COMPILE"):
        sys.exit(1)
    print("NEURON_IGNORE_TRAINING_SCRIPT_ERROR_AND_COMPILE is set, continuing to compile", flush=True)
named = [line.split("Extracting graphs (")[1].split(")")[0] for line in log if "Extracting graphs" in line]
print(f"New graph list from script {len(named)}", flush=True)
if not named:
    print("No todo hlos found in cache or hlo_tasklist, parallel_compile return before spawning "
          "workers....", flush=True)
    sys.exit(0)
results = compile_cache.compile_named(named, say=lambda line: print(line, flush=True))
failed = sum(1 for ok in results.values() if not ok)
print(f"Total graphs: {len(results)}")
print(f"Total successful compilations: {len(results) - failed}")
print(f"Total failed compilations: {failed}", flush=True)
sys.exit(failed)
