"""neuron_parallel_compile as its source runs it (docs/sources.md, "neuron_parallel_compile as
its source runs"), default command collect-and-compile only:

- the trial: the command with NEURON_EXTRACT_GRAPHS_ONLY=1, its output streamed and logged; a
  failed trial stops here with status 1 unless NEURON_IGNORE_TRAINING_SCRIPT_ERROR_AND_COMPILE;
- the graphs the trial's log names ("Extracting graphs (<path>)"), none: "No todo hlos found",
  no totals, status 0; else each not done (a failed one counts as done) and not locked compiled,
  retried NEURON_PARALLEL_COMPILE_MAX_RETRIES more times if it fails, then the totals of those
  it compiled (a trial over a warm cache names its graphs and the totals count none: the
  source's reading; what a trn1 prints there is not in the sources);
- the exit status: the number of failed compilations.
Info lines carry the prefix the docs' newest log shows ("<date> <time>:  <pid>  INFO
||NEURON_PARALLEL_COMPILE||: ", 2024-11: tests/platform_output/corpus.yaml); an error line's
prefix is not in the sources ("ERROR" in its place).
"""
import os
import subprocess
import sys

from trn1_platform import compile_cache
from trn1_platform.rules import NPC_PREFIX, stamped


def say(line: str, error: bool = False) -> None:
    print(stamped((NPC_PREFIX.replace("INFO", "ERROR", 1) if error else NPC_PREFIX) + line), flush=True)


command = sys.argv[1:]
if not command or command[0].startswith("--"):
    print("usage: neuron_parallel_compile <command> [args...] (the double: collect-and-compile only)",
          file=sys.stderr)
    sys.exit(2)
say("Running trial run (add option to terminate trial run early; also ignore trial run's "
    "generated outputs, i.e. loss, checkpoints)")
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
    say(str(error), error=True)
    status = -1
compile_cache.journal("trial", status=status)
if status != 0:
    say("There was an error in the training script.", error=True)
    if not os.environ.get("NEURON_IGNORE_TRAINING_SCRIPT_ERROR_AND_COMPILE"):
        sys.exit(1)
    say("NEURON_IGNORE_TRAINING_SCRIPT_ERROR_AND_COMPILE is set, continuing to compile")
named = [line.split("Extracting graphs (")[1].split(")")[0] for line in log if "Extracting graphs" in line]
say(f"New graph list from script {len(named)}: " + "\n\t".join(named))
if not named:
    say("No todo hlos found in cache or hlo_tasklist, parallel_compile return before spawning "
        "workers....")
    sys.exit(0)
results = compile_cache.compile_named(named, say=lambda line: say(line, error=True))
failed = sum(1 for ok in results.values() if not ok)
say(f"Total graphs: {len(results)}")
say(f"Total successful compilations: {len(results) - failed}")
say(f"Total failed compilations: {failed}")
sys.exit(failed)
