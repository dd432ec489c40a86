"""neuronx-cc as the double has it: `--version` only (notebooks never run the compiler by hand)."""
import sys

from trn1_platform import rules

if sys.argv[1:] == ["--version"]:
    print(f"NeuronX Compiler version {rules.NEURONX_CC_VERSION}")
    sys.exit(0)
print("neuronx-cc (trn1 double): only --version; graphs compile through torch-neuronx", file=sys.stderr)
sys.exit(2)
