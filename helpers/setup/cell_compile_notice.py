"""No silent compile in a notebook's own cells either: setup() has the kernel run the scripts'
compile notice (mnist_mlp.common.compile_notice) around every cell that runs once torch_xla is
loaded, so a cell whose graph compiles longer than a few seconds says so under itself while it
waits (a background thread's output goes to the cell running). In the kernel the notice counts
only its own compiles: the compile cache names a graph only while the kernel itself compiles,
never one a script the cell runs is compiling (that script's log says it).
"""
from __future__ import annotations

import sys

from mnist_mlp.common.compile_notice import CompileNotice, notice_for_this_process


class CellCompileNotice:
    """IPython's pre_run_cell / post_run_cell hooks: a CompileNotice for the cell's duration."""

    def __init__(self, make_notice=None):
        self.make_notice = make_notice or (lambda: notice_for_this_process(
            cache_only_while_counting=True))
        self.notice: CompileNotice | None = None

    def pre_run_cell(self, *_):
        # Only once torch_xla is loaded: reading its counters must not be what imports it, and
        # between cells the main thread imports nothing, so its metrics module loads safely here.
        if self.notice is None and "torch_xla" in sys.modules:
            self.notice = self.make_notice().start()

    def post_run_cell(self, *_):
        if self.notice is not None:
            notice, self.notice = self.notice, None
            notice.stop()


def watch_compiles_in_cells(ipython=None) -> bool:
    """Register the hooks once in this kernel; False outside IPython (a plain script)."""
    if ipython is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        ipython = get_ipython()
    if ipython is None:
        return False
    if any(isinstance(getattr(hook, "__self__", None), CellCompileNotice)
           for hook in ipython.events.callbacks["pre_run_cell"]):
        return True
    hooks = CellCompileNotice()
    ipython.events.register("pre_run_cell", hooks.pre_run_cell)
    ipython.events.register("post_run_cell", hooks.post_run_cell)
    return True
