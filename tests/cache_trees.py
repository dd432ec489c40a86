"""Compile-cache trees in the real Neuron layouts for the tests: the demo cache
(helpers.cache.demo) plus symlinks out of it and stray items. The `tree` fixture
(tests/conftest.py) builds one and checks afterwards that nothing outside it changed."""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

from helpers.cache.demo import DEMO_ENTRIES, DEMO_LEGACY_VERSION, DEMO_OLD_VERSION, DEMO_VERSION, build_demo_cache

CURRENT, OLD, LEGACY = DEMO_VERSION, DEMO_OLD_VERSION, DEMO_LEGACY_VERSION
CUR_DIR = f"neuronxcc-{CURRENT}"
OLD_DIR = f"neuronxcc-{OLD}"
LEGACY_DIR = f"USER_neuroncc-{LEGACY}"
DAY = 86400
ENTRIES = DEMO_ENTRIES
# The states expected of the demo entries, spelled out here independently of the library.
STATE_OF = {"done_hex": "done", "done_big": "done", "failed": "failed",
            "failed_with_link": "failed", "locked_fresh": "locked", "locked_stale": "locked",
            "incomplete": "incomplete", "bad_flags": "done", "old_done": "done",
            "old_failed": "failed", "old_locked_fresh": "locked", "legacy": "done"}
ALL_STATES = {"done": 5, "failed": 3, "locked": 3, "incomplete": 1, "unknown": 0}
LINKED = f"{CUR_DIR}/MODULE_eeee0000eeee0000eeee+ede6753c"  # a symlinked "entry"


@dataclass
class CacheTree:
    root: Path
    outside: Path  # what the symlinks in the tree point at: must survive everything
    now: float

    def key(self, label: str) -> str:
        return ENTRIES[label].key

    def path(self, label: str) -> Path:
        return self.root / self.key(label)


def build_cache_tree(base: Path, labels=None) -> CacheTree:
    """The demo cache under base/cache, plus symlinks out of it to targets under base/outside
    and stray items (full tree only)."""
    now = time.time()
    root, outside = base / "cache", base / "outside"
    (outside / "entry_dir").mkdir(parents=True)
    (outside / "secret.txt").write_text("outside the cache: must never be touched\n")
    (outside / "entry_dir" / "model.neff").write_bytes(b"outside neff")
    (outside / "entry_dir" / "model.done").write_bytes(b"")
    build_demo_cache(root, labels, now=now)
    if labels is None:
        (root / ENTRIES["failed_with_link"].key / "notes.lnk").symlink_to(outside / "secret.txt")
        (root / LINKED).symlink_to(outside / "entry_dir")
        (root / CUR_DIR / "README.txt").write_text("a stray file\n")
        (root / "escape").symlink_to(outside)
        (root / "stray_dir").mkdir()
    return CacheTree(root, outside, now)


def outside_snapshot(tree: CacheTree) -> dict[str, str]:
    return {p.relative_to(tree.outside).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(tree.outside.rglob("*")) if p.is_file()}


def tree_files(root: Path) -> dict:
    """Every regular file's content (size and mtime for the 2 GiB sparse one: reading it is slow)."""
    def content(p):
        st = p.stat()
        return (st.st_size, st.st_mtime_ns) if st.st_size > 1024**2 else p.read_bytes()
    return {p.relative_to(root).as_posix(): content(p)
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}
