"""tqdm for the notebooks, whose saved text form shows where the bar ended.

tqdm's notebook bar is a widget; the text a saved notebook keeps beside it (what GitHub and a
fresh JupyterLab show before the widget loads) is captured when the bar appears: "0%". This bar
re-sends its display when it closes, so the saved text reads "100% ... 7500/7500".
"""
from __future__ import annotations

from IPython.display import display
from tqdm.auto import tqdm as _auto_tqdm
from tqdm.notebook import tqdm_notebook


class NotebookBar(tqdm_notebook):
    def __init__(self, *args, **kwargs):
        kwargs["display"] = False  # shown here instead, with a handle to update at close
        super().__init__(*args, **kwargs)
        self._handle = None
        if not self.disable:
            self._handle = display(self.container, display_id=True)
            self.displayed = True

    def close(self):
        super().close()
        if self._handle is not None:
            self._handle.update(self.container)
            self._handle = None


# In a Jupyter kernel tqdm.auto picks the notebook bar; elsewhere (a terminal, a test) plain tqdm.
tqdm = NotebookBar if issubclass(_auto_tqdm, tqdm_notebook) else _auto_tqdm
