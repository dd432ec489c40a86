"""`python -m helpers.cache ls|show|prune|export|import`: the cache tool in a terminal.

Exit status: 0 done, 1 a removal failed part way (the output says which), 2 refused (bad
input, no cache, unsafe archive; one line on stderr says why and what to do).
"""
from __future__ import annotations

import argparse
import json
import sys

from helpers.cache import archive, plans
from helpers.cache.location import CACHE_URL_ENV, CompileCacheError, locate_cache
from helpers.cache.render import render_entry, render_scan
from helpers.cache.scan import LOCK_STALE_AFTER_S, STATES, scan_cache
from helpers.cache.units import parse_size
from mnist_mlp.common.neuron_cc_flags import FlagsError
from mnist_mlp.common.platform_paths import default_compile_cache

PROG = "python -m helpers.cache"


def _amount(text: str) -> float:
    try:
        return plans.check_amount(text, text)
    except CompileCacheError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number, 0 or more") from None


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


class _Parser(argparse.ArgumentParser):
    """Bad arguments: two lines (what is wrong, where to look), not the whole usage text."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n(see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Inspect and tidy the Neuron persistent compile cache. Removals always print "
                    "their plan first; --dry-run stops there.")
    common = _Parser(add_help=False)
    common.add_argument("--root", help="cache directory (default: --cache_dir in NEURON_CC_FLAGS, "
                        f"else {CACHE_URL_ENV}, else {default_compile_cache()})")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("ls", parents=[common], help="list entries and summaries")
    p.add_argument("--state", action="append", choices=STATES, help="only this state (repeatable)")
    p.add_argument("--version", action="append", help="only this compiler version (repeatable)")
    p = sub.add_parser("show", parents=[common], help="details of one entry")
    p.add_argument("entry", help="entry key, MODULE_ name or a unique hash prefix")
    p = sub.add_parser("prune", parents=[common], help="remove failed entries, stale locks, "
                       "other compiler versions or least recently used entries")
    p.add_argument("--failed", action="store_true", help="remove failed entries")
    p.add_argument("--stale-locks", action="store_true", help="clear locks left by killed compiles")
    p.add_argument("--lock-age-minutes", type=_amount, default=LOCK_STALE_AFTER_S / 60,
                   help="a lock younger than this is never stale (default %(default)g)")
    p.add_argument("--other-versions", action="store_true",
                   help="remove entries of compiler versions other than the installed one")
    p.add_argument("--keep-version", help="the compiler version to keep with --other-versions")
    p.add_argument("--max-size", type=_size, help="prune LRU entries until the cache fits, "
                   "e.g. 20G (on-disk bytes, powers of 1024)")
    p.add_argument("--older-than-days", type=_amount, help="remove entries unused for this long")
    p.add_argument("--dry-run", action="store_true", help="print the plan, remove nothing")
    p = sub.add_parser("export", parents=[common],
                       help="write a tar.gz of the cache's done entries with a manifest")
    p.add_argument("archive", help="output .tar.gz (outside the cache)")
    p.add_argument("--version", action="append", help="only this compiler version (repeatable)")
    p.add_argument("--no-progress", action="store_true")
    p = sub.add_parser("import", parents=[common], help="merge an exported tar.gz into the cache")
    p.add_argument("archive")
    p.add_argument("--no-progress", action="store_true")
    return parser


def _prune(args, root, out) -> int:
    lock_age = args.lock_age_minutes * 60
    scan = scan_cache(root)
    compilers = plans.compiler_processes()
    # Each plan sees what the earlier ones leave: an entry is listed once, and the size
    # budget is measured after the failed and other-version entries are gone.
    made = []
    if args.stale_locks:
        made.append(plans.plan_clear_stale_locks(scan, lock_age, compilers))
    if args.failed:
        made.append(plans.plan_remove_failed(scan.without(made)))
    if args.other_versions:
        made.append(plans.plan_remove_other_versions(scan.without(made), args.keep_version,
                                                     lock_age, compilers))
    if args.max_size is not None or args.older_than_days is not None:
        made.append(plans.plan_prune(scan.without(made), args.max_size, args.older_than_days))
    if not args.json:
        for plan in made:
            print(plan.render())
        print("(dry run: nothing removed)" if args.dry_run else "Applying…", flush=True)
    results = [] if args.dry_run else [plans.apply_plan(plan, lock_age) for plan in made]
    if not args.json:
        for r in results:
            print(r.render())
    failed = [key for r in results for key, _ in r.failed]
    if failed and not args.json:
        print(f"error: {len(failed)} item(s) could not be removed (listed as FAILED above); "
              "fix the cause (permissions, immutable files) and run prune again", file=sys.stderr)
    out("", {"dry_run": args.dry_run, "plans": [p.to_dict() for p in made],
             "results": [r.to_dict() for r in results]})
    return 1 if failed else 0


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "prune" and not (args.failed or args.stale_locks or args.other_versions
                                        or args.max_size is not None
                                        or args.older_than_days is not None):
        parser.error("prune: say what to remove: --failed, --stale-locks, --other-versions, "
                     "--max-size and/or --older-than-days")

    def out(text, data):
        if args.json:
            print(json.dumps(data, indent=1, default=str))
        elif text:
            print(text)

    try:
        if args.root:
            root, where = args.root, " (--root)"
        else:
            root = locate_cache()
            where = f" (from {root.source})"
        if args.command == "ls":
            scan = scan_cache(root)
            shown = scan.filter(args.state, args.version)
            data = scan.to_dict()
            data["entries"] = [e.to_dict() for e in shown]
            out(render_scan(scan, where, shown), data)
        elif args.command == "show":
            e = scan_cache(root).find(args.entry)
            out(render_entry(e), e.to_dict())
        elif args.command == "prune":
            return _prune(args, root, out)
        elif args.command == "export":
            r = archive.export_cache(root, args.archive, args.version,
                                     progress=not (args.no_progress or args.json))
            out(r.render(), {"archive": str(r.archive), "entries": r.entries, "files": r.files,
                             "size_bytes": r.size_bytes, "manifest": r.manifest})
        elif args.command == "import":
            r = archive.import_cache(args.archive, root,
                                     progress=not (args.no_progress or args.json))
            out(r.render(), r.to_dict())
    except (CompileCacheError, FlagsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0
