"""neuron-explorer as the double has it: `view` reads the capture directory and prints what it
holds; the summary's own shape is not documented at Neuron 2.31, so none is imitated."""
import sys
from pathlib import Path

args = sys.argv[1:]
if args[:1] == ["view"] and "-d" in args:
    folder = Path(args[args.index("-d") + 1])
    files = sorted(p.name for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []
    print(f"neuron-explorer (trn1 double): {len(files)} file(s) in {folder}; no summary is imitated")
    sys.exit(0)
print("neuron-explorer (trn1 double): only `view -d <dir>`", file=sys.stderr)
sys.exit(2)
