"""A Neuron tool no notebook runs: present on PATH (notebook 00's checklist looks for it), nothing more."""
import os
import sys

print(f"{os.path.basename(sys.argv[0])} (trn1 double): not modelled; no notebook runs it", file=sys.stderr)
sys.exit(2)
