"""One plain-text table formatter for the CLI, the widgets' text fallbacks and the notebooks."""
from __future__ import annotations

from typing import Sequence


def cell_text(value) -> str:
    """Floats to 4 significant places, None as '-', everything else as str()."""
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def text_table(rows: Sequence[Sequence], header: Sequence[str], *, right: set[int] = frozenset(),
               rule: bool = False) -> str:
    """Columns padded to their widest cell; `right` holds the indices of right-aligned columns;
    rule=True adds a line of dashes under the header."""
    body = [[cell_text(v) for v in row] for row in rows]
    header = [str(h) for h in header]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def fmt(row):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(row, widths))).rstrip()

    lines = [fmt(header)]
    if rule:
        lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines + [fmt(r) for r in body])
