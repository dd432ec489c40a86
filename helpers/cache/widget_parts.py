"""What the cache widgets share: their style, layout and the look of their buttons and messages."""
from __future__ import annotations

import html

import ipywidgets as W

from helpers.cache.units import human_bytes, short_time

STYLE = W.HTML("<style>.cc-mono select, .cc-mono pre {font-family: monospace; font-size: 12px}"
              ".cc-scroll {overflow-x: auto}</style>")
ALL = "(all)"
UNSET = "(unset)"
LABEL = {"description_width": "initial"}  # descriptions never cut to "Keep vers…"
FULL = "99%"  # of the output area: 100% plus a widget's 2 px margin would overflow it


def row_layout() -> W.Layout:
    """A row that wraps where the output area is narrow."""
    return W.Layout(flex_flow="row wrap", align_items="center", width=FULL)


ERROR, NOTE, OK = "#b00", "#a60", "#070"


def pre_html(text: str) -> str:
    return f"<pre style='white-space: pre-wrap; margin: 0'>{html.escape(text)}</pre>"


def coloured(text: str, colour: str, pre: bool = False) -> str:
    body = pre_html(text) if pre else f"<b>{html.escape(text)}</b>"
    return f"<div style='color:{colour}'>{body}</div>"


def with_text(bundle, text: str):
    """A widget's display bundle with `text` as its text/plain."""
    bundle = dict(bundle or {})
    bundle["text/plain"] = text
    return bundle


def button(description: str, tooltip: str, css: str, **kwargs) -> W.Button:
    b = W.Button(description=description, tooltip=tooltip, layout=W.Layout(width="auto"),
                 **kwargs)
    b.add_class(css)
    return b


def row_label(e) -> str:
    """One table row: state, size, last use, compiler version, MODULE_ name (fits ~800 px)."""
    name = e.key.split("/", 1)[-1]
    return (f"{e.state:<10} {human_bytes(e.size_bytes):>10}  {short_time(e.last_used)}  "
            f"{e.compiler_version:<22} {name}")


