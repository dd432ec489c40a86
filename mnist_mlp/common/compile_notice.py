"""No silent compile: while a run waits for a compile longer than QUIET_S, the script's log says
so (stdout, which a notebook streaming the log shows), how long so far, every EVERY_S, and why:
a graph not in the compile cache, or one whose entry failed before; then how long it took.

A daemon thread looks every POLL_S at two signals:
- torch-xla's counters (xla_metrics.compiles_started_and_finished): a compile has started and not
  ended. On a trn1, neuronx-cc runs in between (the compiler wrapper, called from the compile).
- on Neuron, the compile cache (compile_cache): an entry under neuronxcc-<version>/ that gained a
  lock since the run began (a compile writing it), or appeared new and is not done; it names the
  graph, and an entry that was failed when the run began says the graph failed before. With
  no such entry, one locked before the run began and still locked is what the compiler
  wrapper waits on ("Another process must be compiling"): another run's compile, or a
  killed one's lock, which nothing ever lifts.
A cache hit is read in a tenth of a second: silent. Rank 0 speaks, as for progress.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from pathlib import Path

from mnist_mlp.common.compile_cache import local_cache_dir, module_entries, module_state
from mnist_mlp.common.neuron_cc_flags import ENV_VAR, RETRY_FAILED, FlagsError, compiler_flag

QUIET_S = 5.0  # a compile shorter than this prints nothing
# By backend (this module is where the notice's backend values live): on a trn1 any compile over
# a few seconds is neuronx-cc at work; on the stand-in a busy 2-core machine can take seconds
# for one of this MLP's graphs, which is no news to a learner.
QUIET_S_BY_BACKEND = {"neuron": QUIET_S, "xla-cpu": 30.0}
EVERY_S = 15.0  # then one line this often while it runs
POLL_S = 0.5
# The workbook's first aid for a lock a killed compile left (notebooks/README.md); printed, not
# run: the cache tool lives in the notebooks' helpers, which this runtime does not import.
PRUNE_STALE_LOCKS = ".venv/bin/python -m helpers.cache prune --stale-locks --lock-age-minutes 0"


def duration(seconds: float) -> str:
    """12 s, 3 min 5 s."""
    seconds = int(round(seconds))
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60} s"


# The tutorial's log (docs/sources.md, "train.py's first run compiles two graphs": 16:15:00 ->
# 16:18:05, then -> 16:18:12), from 2022 and a pre-release compiler: the upper figure.
# helpers.classroom.time_budget reads them too.
SLOWEST_COMPILE_S, FASTEST_COMPILE_S = 185, 7
# A current compiler's small graph (docs/sources.md, "A small graph compiles in about 5 s":
# neuronx-cc 2.16, Neuron 2.21, 2025): the typical figure.
TYPICAL_COMPILE_S = 5
NEURON_HINT = (f"the tutorial's 2022 log took {duration(SLOWEST_COMPILE_S)} for this MLP's first graph, "
               f"{duration(FASTEST_COMPILE_S)} for its second; a 2025 log's small graphs took about "
               f"{duration(TYPICAL_COMPILE_S)}")


class CompileNotice:
    """Says what a run's compiles cost while they run. `counters`: a callable returning (compiles
    started, compiles finished), or None; `cache_dir`: the Neuron compile cache to watch, or
    None. poll() is one look (the thread calls it; the tests call it with their own clock)."""

    def __init__(self, *, counters=None, cache_dir: Path | None = None, retry_failed: bool = False,
                 cache_only_while_counting: bool = False, say=None, clock=time.monotonic,
                 quiet_s: float = QUIET_S, every_s: float = EVERY_S, poll_s: float = POLL_S):
        self.counters, self.cache_dir, self.retry_failed = counters, cache_dir, retry_failed
        # A notebook's kernel: its own compiles only, not the ones of a script it runs.
        self.cache_only_while_counting = cache_only_while_counting
        self.say = say or _say
        self.clock, self.quiet_s, self.every_s, self.poll_s = clock, quiet_s, every_s, poll_s
        self.states_at_start: dict[str, str] = {}
        self._settled: set[str] = set()  # entries this run saw done: never read again
        self._base = self._last = (0, 0)
        self._since = self._next_at = None
        self._entry: tuple[str, str] | None = None  # (key, why) of the graph compiling
        self._announced, self._head = False, "Compiling a graph"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "CompileNotice":
        if self.counters is not None:
            self._base = self._last = self.counters()
        if self.cache_dir is not None:
            self.states_at_start = {key: module_state(path)
                                    for key, path in module_entries(self.cache_dir).items()}
        self._thread = threading.Thread(target=self._run, name="compile-notice", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop looking; a compile announced and ended meanwhile gets its closing line."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.poll()

    def __enter__(self) -> "CompileNotice":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.poll()

    def poll(self) -> None:
        now = self.clock()
        counting, another = self._counters_say_compiling()
        entry = (self._compiling_entry(new_ok=counting)
                 if counting or not self.cache_only_while_counting else None)
        if another and self._since is not None:  # one compile ended, the next began: two lines
            self._close(now)
        if counting or entry is not None:
            if self._since is None:
                self._since, self._entry = now, None
            self._entry = self._entry or entry
            elapsed = now - self._since
            if not self._announced and elapsed >= self.quiet_s:
                waiting = self._entry is None and self.cache_dir is not None and self.still("locked")
                self._head = "Waiting for a compile" if waiting else "Compiling a graph"
                self.say(f"{self._head}: {duration(elapsed)} so far ({self._why()})")
                self._announced, self._next_at = True, now + self.every_s
            elif self._announced and now >= self._next_at:
                self.say(f"{self._head}: {duration(elapsed)} so far")
                self._next_at += self.every_s
            return
        self._close(now)

    def _close(self, now: float) -> None:
        if self._announced:
            self.say(self._closing(now - self._since))
        self._since, self._entry, self._announced = None, None, False

    def _counters_say_compiling(self) -> tuple[bool, bool]:
        """(a compile is running, a compile ended since the last look while another runs)."""
        if self.counters is None:
            return False, False
        started, finished = self.counters()
        another = finished > self._last[1] and started > self._last[0]
        self._last = (started, finished)
        if started - self._base[0] > finished - self._base[1]:
            return True, another
        self._base = (started, finished)  # only what starts from here counts
        return False, False

    def _compiling_entry(self, new_ok: bool) -> tuple[str, str] | None:
        """(key, why) of an entry a compile is writing: locked since the run began, or (while
        the counters say a compile runs) new and not done. None without a cache to read."""
        if self.cache_dir is None:
            return None
        fallback = None
        for key, path in module_entries(self.cache_dir).items():
            before = self.states_at_start.get(key)
            # a hit reads it; an old lock is no compile of ours; a settled one compiles no more
            if before in ("done", "locked") or key in self._settled:
                continue
            state = module_state(path)
            if state == "done":
                self._settled.add(key)
            if before == "failed":
                why = (f"{key} failed before; {RETRY_FAILED} compiles it again"
                       if state == "locked" else None)
            else:
                why = f"{key} is not in the compile cache {self.cache_dir}"
            if why and state == "locked":
                return key, why
            if why and new_ok and before is None and state not in ("done", "failed"):
                fallback = key, why
        return fallback

    def _why(self) -> str:
        if self._entry is not None:
            return self._entry[1] + (f"; {NEURON_HINT}" if self.cache_dir else "")
        if self.cache_dir is not None:
            locked = self.still("locked")
            if locked:  # the wrapper waits on a lock, with no end if nobody holds it
                return (f"on {locked[0]}, locked before this run began: another process is "
                        "compiling it, or a killed compile left its lock; if no other run uses "
                        f"this cache: {PRUNE_STALE_LOCKS} --dry-run, then without --dry-run")
            return f"a graph new to this run, not in the compile cache {self.cache_dir}; {NEURON_HINT}"
        return "a graph new to this process: XLA compiles each new graph once"

    def _closing(self, elapsed: float) -> str:
        if self._entry is not None and self.cache_dir is not None:
            key = self._entry[0]
            if module_state(self.cache_dir / key) == "failed":
                return (f"Compile failed after {duration(elapsed)}: {key} now holds a failed entry; "
                        f"a run that meets it stops unless {ENV_VAR} has {RETRY_FAILED}")
            return f"Compiled a graph in {duration(elapsed)} ({key})"
        return f"Compiled a graph in {duration(elapsed)}"

    def still(self, state: str) -> list[str]:
        """Entries that were in `state` ("locked", "failed") when the run began, and still are."""
        return [key for key, began in self.states_at_start.items() if began == state
                and module_state(self.cache_dir / key) == state]


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")  # one write: a line the main thread prints is not split
    sys.stdout.flush()


def notice_for_this_process(env=None, say=None, **options) -> CompileNotice:
    """A (not yet started) CompileNotice for this process, which has loaded torch_xla: its
    counters, and on Neuron (PJRT_DEVICE=NEURON) the compile cache its environment names."""
    from mnist_mlp.common.xla_metrics import compiles_started_and_finished

    env = os.environ if env is None else env
    on_neuron = env.get("PJRT_DEVICE", "").upper() == "NEURON"
    options.setdefault("quiet_s", QUIET_S_BY_BACKEND["neuron" if on_neuron else "xla-cpu"])
    try:
        cache_dir = local_cache_dir(env) if on_neuron else None
        retry_failed = compiler_flag(RETRY_FAILED, env) is True
    except FlagsError as err:  # the wrapper cannot read them either: say so, watch no cache
        (say or _say)(f"Compile notice: watching no compile cache: {err}")
        cache_dir, retry_failed = None, False
    return CompileNotice(counters=compiles_started_and_finished, say=say, cache_dir=cache_dir,
                         retry_failed=retry_failed, **options)


@contextlib.contextmanager
def watch_compiles(env=None, say=None):
    """Around a script's main(): a CompileNotice when this process has loaded torch_xla (the XLA
    stage scripts import it before main) and is rank 0; on Neuron it also watches the cache.
    When the run fails while the cache holds entries that failed before, says which: a graph
    whose compile failed is not compiled again unless --retry_failed_compilation."""
    env = os.environ if env is None else env
    if "torch_xla" not in sys.modules or env.get("RANK", "0") != "0":
        yield None
        return
    notice = notice_for_this_process(env, say)
    with notice:
        try:
            yield notice
        except BaseException:
            failed = notice.still("failed") if notice.cache_dir is not None and not notice.retry_failed else []
            if failed:
                keys = ", ".join(failed[:3])
                notice.say(f"The compile cache {notice.cache_dir} holds entries whose compile failed "
                           f"before ({keys}): the compiler wrapper skips such a graph and the run "
                           f"stops; fix the cause, then add {RETRY_FAILED} to {ENV_VAR}")
            raise
