"""Plain-text views of a scan and of one entry (the CLI, the browser's detail pane, notebooks).
Byte sizes and times as people read them are helpers.cache.units, which the scan uses too."""
from __future__ import annotations

import shutil

from helpers.cache.location import filesystem_type
from helpers.cache.scan import CacheScan, Entry
from helpers.cache.units import human_bytes, short_time
from helpers.show.tables import text_table
from mnist_mlp.common.compile_cache import STATES


def report(head: str, **reasons) -> str:
    """A head line, then each verb's (key, why) pairs as '  <verb> <key>: <why>' lines."""
    return "\n".join([head] + [f"  {verb} {key}: {why}" for verb, pairs in reasons.items()
                                for key, why in pairs])


def reason_dicts(pairs) -> list[dict]:
    """(key, why) pairs for JSON output."""
    return [{"key": key, "why": why} for key, why in pairs]


FAILURE_LINES = 12  # of a stored failure, in `show`


def flags_text(e: Entry, width: int = 40) -> str:
    if e.flags_error:
        text = "(unreadable flags)"
    elif e.flags is None:
        text = "-"
    else:
        text = " ".join(e.flags) or "(none)"
    return text if len(text) <= width else text[: width - 1] + "…"


def render_scan(scan: CacheScan, location: str = "", entries: list[Entry] | None = None) -> str:
    entries = scan.entries if entries is None else entries
    lines = [f"Compile cache: {scan.root}{location}", f"  {scan.summary()}"]
    try:
        usage = shutil.disk_usage(scan.root)
        lines.append(f"  filesystem: {filesystem_type(scan.root) or '?'}, "
                     f"{human_bytes(usage.free)} free of {human_bytes(usage.total)}")
    except OSError:
        pass
    versions = scan.by_version()
    if versions:
        lines += ["", text_table([[v, s.entries, *(s.by_state[st] for st in STATES),
                                   human_bytes(s.size_bytes), human_bytes(s.disk_bytes)]
                                  for v, s in versions.items()],
                                 ["VERSION", "ENTRIES", *(st.upper() for st in STATES), "SIZE",
                                  "ON DISK"], right=set(range(1, 8)))]
    if entries:
        lines += ["", text_table([[e.state, human_bytes(e.size_bytes), human_bytes(e.neff_bytes),
                                   short_time(e.last_used), flags_text(e), e.key]
                                  for e in entries],
                                 ["STATE", "SIZE", "NEFF", "LAST USED", "FLAGS", "ENTRY"],
                                 right={1, 2})]
    if scan.unknown:
        lines += ["", f"Not recognised ({len(scan.unknown)}), left alone:"]
        lines += [f"  {u.key}: {u.reason}" for u in scan.unknown]
    if scan.notes:
        lines += [""] + [f"Note: {n}" for n in scan.notes]
    return "\n".join(lines)


def render_entry(e: Entry) -> str:
    lines = [f"Entry {e.key}", f"  path:      {e.path}", f"  state:     {e.state}",
             f"  layout:    {e.layout} (compiler {e.compiler_version})",
             f"  hashes:    module {e.module_hash} ({e.hash_style})"
             + (f", flags {e.flags_hash}" if e.flags_hash else ""),
             f"  sizes:     total {human_bytes(e.size_bytes)} apparent, "
             f"{human_bytes(e.disk_bytes)} on disk; neff {human_bytes(e.neff_bytes)}, "
             f"HLO {human_bytes(e.hlo_bytes)}",
             f"  last used: {short_time(e.last_used)} (newest file mtime)"]
    if e.flags_error:
        lines.append(f"  flags:     unreadable: {e.flags_error}")
    elif e.flags is not None:
        lines.append(f"  flags:     {' '.join(e.flags) or '(none)'}")
    if e.lock_files:
        lines.append(f"  locks:     {', '.join(e.lock_files)} (youngest {e.lock_age_s / 60:.1f} min old)")
    lines.append(f"  files:     {', '.join(e.files) or '(none)'}")
    if e.symlinks:
        lines.append(f"  symlinks (not followed): {', '.join(e.symlinks)}")
    if e.special:
        lines.append(f"  not regular files (never read): {', '.join(e.special)}")
    if e.unreadable:
        lines.append(f"  unreadable: {'; '.join(e.unreadable)}")
    if e.unknown_text:
        lines += ["  model.neff is text without the compiler's failure markers: state unknown, "
                  "kept by every cleanup:"]
        lines += [f"    {ln}" for ln in e.unknown_text.splitlines()[:FAILURE_LINES]]
    if e.failure:
        failure = e.failure.splitlines() or [""]
        lines += ["  stored failure (the model.neff holds this text, not a program):"]
        lines += [f"    {ln}" for ln in failure[:FAILURE_LINES]]
        if len(failure) > FAILURE_LINES:
            lines.append(f"    … ({len(failure) - FAILURE_LINES} more lines)")
    if e.log_tail:
        lines += ["  log tail:"] + [f"    {ln}" for ln in e.log_tail.splitlines()]
    return "\n".join(lines)
