"""Workshop tools behind `make reset`, `make notebooks` and `make classroom-cache`.

    python -m helpers.classroom reset [--yes]        notebooks as committed; checkpoints/, results/ gone
    python -m helpers.classroom cache --archive F    run every notebook into one compile cache, export it
    python -m helpers.classroom check                a student's pass: any graph the cache lacks?
    python -m helpers.classroom notebooks            `make notebooks`: execute in place, record graphs

Both show what they will do before doing it. `make classroom-import ARCHIVE=F` is
`python -m helpers.cache import F` on each student machine.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Callable

from helpers.classroom.notebook_pass import (
    build_classroom_cache,
    check_cache,
    check_pass,
    done_entries,
    graph_pass,
    record_notebooks,
)
from helpers.classroom.reset import reset
from mnist_mlp.common.paths import REPO_ROOT


def run_check(record_path: Path, on_line: Callable[[str], object] = print) -> int:
    """`make classroom-check`: a student's pass, against the record of this machine's backend;
    on Trainium also against the compile cache itself (what the pass compiled into it)."""
    from helpers.classroom.graph_record import kernel_backend, read_record

    backend = kernel_backend()
    record = read_record(backend, record_path)
    workdir = REPO_ROOT / "build" / "classroom-check"
    if backend != "neuron":
        if record is None:  # before a long pass: is there anything to compare with?
            raise FileNotFoundError(f"{record_path} has no record for {backend}: run `make "
                                    "notebooks` (or `make classroom-cache`) first")
        return check_pass(graph_pass(REPO_ROOT, workdir), record, record_path, on_line)
    from helpers.cache.location import locate_cache

    cache = locate_cache().path  # the student's cache, where classroom-import put the archive
    before = done_entries(cache)
    done = graph_pass(REPO_ROOT, workdir)
    code = check_cache(before, cache, on_line)
    if record is None:
        on_line(f"{record_path.name} holds no neuron record: the compile cache above is the check.")
        return code
    return max(code, check_pass(done, record, record_path, on_line))


def main(argv=None) -> int:
    from helpers.classroom.graph_record import RECORD

    parser = argparse.ArgumentParser(prog="python -m helpers.classroom", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    reset_cmd = commands.add_parser("reset", help="notebooks as committed, run outputs removed")
    reset_cmd.add_argument("--yes", action="store_true", help="do not ask")
    cache_cmd = commands.add_parser("cache", help="precompile the workbook's graphs, one archive")
    cache_cmd.add_argument("--archive", type=Path, default=REPO_ROOT / "build" / "classroom-cache.tar.gz")
    check_cmd = commands.add_parser("check", help="run the workbook as a student would; compare "
                                    "its graphs with the record (on Trainium: with the cache)")
    check_cmd.add_argument("--record", type=Path, default=RECORD)
    notebooks_cmd = commands.add_parser("notebooks", help="re-execute notebooks in place, then the "
                                        "exercise solutions; write the graphs' record")
    for option in ("--notebooks", "--solutions"):  # absent: all of them; given alone: none
        notebooks_cmd.add_argument(option, nargs="*", type=Path, default=None,
                                   help=f"the {option[2:]} to run (default: all; none: {option} alone)")
    args = parser.parse_args(argv)
    if args.command == "reset":
        return reset(yes=args.yes, ask=input if sys.stdin.isatty() and not args.yes else None)
    from helpers.cache.location import CompileCacheError
    from helpers.launch.processes import CommandError

    name = "notebooks" if args.command == "notebooks" else f"classroom-{args.command}"
    try:
        if args.command == "cache":
            return build_classroom_cache(args.archive.resolve())
        if args.command == "notebooks":
            return record_notebooks(notebooks=args.notebooks, solutions=args.solutions)
        return run_check(args.record)
    except (CommandError, CompileCacheError, ValueError, OSError, subprocess.CalledProcessError) as err:
        print(f"make {name}: {err}", file=sys.stderr)
        return 1
    except Exception as err:  # a notebook cell failed (nbclient's CellExecutionError)
        print(f"make {name}: a notebook failed: {str(err)[-2000:]}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
