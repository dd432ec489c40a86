"""Hand-made mutants of what mutmut cannot mutate (make mutants runs this after mutmut).

mutmut 3 leaves decorated functions alone, and train_bf16.main() is decorated
(@cli.one_line_errors): the lines that set the Neuron runtime's stochastic rounding and the
compiler's --auto-cast for BF16 live there. Each mutant below is one such line changed, written
into a copy of mnist_mlp/ placed first on the path; tests/test_bf16_on_neuron.py must fail on
every one. `python -m tests.hand_mutants` prints one line per mutant; exit status 1 if any
survived.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = "train_bf16.py"
TESTS = ["tests/test_bf16_on_neuron.py"]
ROUNDING = ('os.environ["NEURON_RT_STOCHASTIC_ROUNDING_EN"] = "1" if args.precision == "bf16-sr" '
            'else "0"')
AUTO_CAST = "set_auto_cast_none()"  # the flag's edit itself is mutmut's (precision.py)
# (what the mutant does, the text in main(), what replaces it)
MUTANTS = [
    ("the stochastic-rounding line deleted", ROUNDING, "pass"),
    ("its values swapped", ROUNDING, ROUNDING.replace('"1" if', '"0" if').replace('else "0"',
                                                                                 'else "1"')),
    ("stochastic rounding for every BF16 mode", ROUNDING,
     ROUNDING.replace('args.precision == "bf16-sr"', 'args.precision.startswith("bf16")')),
    ("the --auto-cast line deleted", AUTO_CAST, "pass"),
    ("the autocast condition inverted", 'if args.precision == "autocast":',
     'if args.precision != "autocast":'),
]


def run_tests(original: str, old: str, new: str) -> int:
    """pytest's exit status on a copy of mnist_mlp/ whose SCRIPT has `old` replaced by `new`."""
    assert original.count(old) == 1, f"not found once in {SCRIPT}: {old}"
    with tempfile.TemporaryDirectory(prefix="hand-mutant-") as tmp:
        package = Path(tmp) / "mnist_mlp"
        shutil.copytree(REPO / "mnist_mlp", package,
                        ignore=shutil.ignore_patterns("__pycache__"))
        (package / SCRIPT).write_text(original.replace(old, new))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([tmp, str(REPO)]),
               "PYTHONDONTWRITEBYTECODE": "1"}
        # Run from the copy's directory: `python -m` puts the working directory first on the
        # path, so the copy is the mnist_mlp imported; the tests come from the checkout.
        result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:xdist",
                                 "-p", "no:cacheprovider", "--import-mode=append",
                                 f"--rootdir={REPO}", *(str(REPO / t) for t in TESTS)],
                                cwd=tmp, env=env, capture_output=True, text=True)
        return result.returncode


def main() -> int:
    original = (REPO / "mnist_mlp" / SCRIPT).read_text()
    if run_tests(original, ROUNDING, ROUNDING) != 0:  # the copy unchanged: the tests must pass
        print(f"{', '.join(TESTS)} fail on an unchanged copy: no hand mutant can be judged")
        return 2
    survived = 0
    for what, old, new in MUTANTS:
        killed = run_tests(original, old, new) == 1  # 1: tests failed (2 or more: not run)
        survived += not killed
        print(f"{'killed  ' if killed else 'SURVIVED'} mnist_mlp/{SCRIPT} main(): {what}")
    print(f"hand mutants of main(): {len(MUTANTS) - survived} of {len(MUTANTS)} killed "
          f"by {', '.join(TESTS)}")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
