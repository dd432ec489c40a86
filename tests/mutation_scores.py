"""The mutation score of each module `mutmut run` mutated (make mutants), from the results it
keeps in mutants/<module>.meta: killed / mutants, per module, and the survivors' names.

A mutant counts as killed when a test failed on it (or it ran past mutmut's time limit, as an
endless loop would); "no tests" (no selected test reaches the function) counts as surviving.
`python -m tests.mutation_scores --survivors` also lists the survivors (`mutmut show <name>`
shows one's change); exit status 1 when a module scores under --bar (90 %).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from mutmut.stats import status_by_exit_code

KILLED = {"killed", "timeout", "caught by type check"}
MUTANTS_DIR = Path("mutants")


def module_results(mutants_dir: Path = MUTANTS_DIR) -> dict[str, dict[str, str]]:
    """{source file: {mutant name: status}} for every file mutmut mutated."""
    results = {}
    for meta in sorted(mutants_dir.rglob("*.py.meta")):
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        if codes:
            source = meta.relative_to(mutants_dir).as_posix().removesuffix(".meta")
            results[source] = {name: status_by_exit_code[code] for name, code in codes.items()}
    return results


def score_lines(results: dict[str, dict[str, str]], bar: float) -> tuple[list[str], bool]:
    """One line per module (and the total) and whether every module reaches `bar`."""
    lines = [f"{'module':34} {'killed':>7} {'mutants':>8} {'score':>7}  other outcomes"]
    all_pass = True
    totals = Counter()
    for source, statuses in results.items():
        counts = Counter(statuses.values())
        killed = sum(counts[s] for s in KILLED)
        score = killed / len(statuses)
        all_pass &= score >= bar
        totals.update(killed=killed, mutants=len(statuses))
        other = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()) if s not in KILLED)
        mark = "" if score >= bar else f"  < {bar:.0%}"
        lines.append(f"{source:34} {killed:7} {len(statuses):8} {score:7.1%}  {other}{mark}")
    if totals["mutants"]:
        lines.append(f"{'all':34} {totals['killed']:7} {totals['mutants']:8} "
                     f"{totals['killed'] / totals['mutants']:7.1%}")
    return lines, all_pass


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bar", type=float, default=0.90, help="the score each module must reach")
    parser.add_argument("--survivors", action="store_true", help="list the surviving mutants")
    args = parser.parse_args(argv)
    results = module_results()
    if not results:
        print("no mutation results in mutants/: run `make mutants` first", file=sys.stderr)
        return 2
    lines, all_pass = score_lines(results, args.bar)
    print("\n".join(lines))
    if args.survivors:
        for _source, statuses in results.items():
            for name, status in statuses.items():
                if status not in KILLED:
                    print(f"{status:12} {name}")
    return 0 if all_pass else 1


if __name__ == "__main__":
    sys.exit(main())
