"""Side-by-side diffs of the stage scripts: what each lesson changes, line by line."""
from __future__ import annotations

import difflib
import html
from dataclasses import dataclass
from pathlib import Path

from IPython.display import HTML

from mnist_mlp.common.paths import repo_relative


@dataclass(frozen=True)
class DiffRow:
    """One row of a side-by-side diff.

    kind: "same", "changed" (left line replaced by right line), "removed" (left only),
    "added" (right only) or "gap" (lines not shown: `hidden` left-hand lines; `hidden_changes`
    counts the changed rows of the hunks left out there, see script_diff_lines' only_hunks_with).
    Line numbers are 1-based; None where that side has no line.
    """
    kind: str
    left_no: int | None = None
    left: str = ""
    right_no: int | None = None
    right: str = ""
    hidden: int = 0
    hidden_changes: int = 0


def _as_lines(text: str | list[str] | tuple[str, ...]) -> list[str]:
    if isinstance(text, str):
        return text.splitlines()
    return [line.rstrip("\n") for line in text]


# When two lines count as one changed line (shown side by side) rather than a removal and an
# addition: difflib's ratio at least SIMILAR_LINE_RATIO (difflib.Differ uses 0.75), or the
# shorter line (of at least CONTAINED_MIN_CHARS) mostly found in the longer, as when a call
# gains an argument or a comment: `tracker.stop()` -> `tracker.stop(wait_for_device=...)`.
SIMILAR_LINE_RATIO = 0.6
CONTAINED_FRACTION = 0.8
CONTAINED_MIN_CHARS = 8


def line_similarity(old: str, new: str) -> float:
    """0..1: how much `old` and `new` look like one line edited (see the constants above)."""
    matcher = difflib.SequenceMatcher(None, old.strip(), new.strip(), autojunk=False)
    ratio = matcher.ratio()
    shorter = min(len(old.strip()), len(new.strip()))
    if shorter >= CONTAINED_MIN_CHARS:
        matched = sum(block.size for block in matcher.get_matching_blocks())
        if matched / shorter >= CONTAINED_FRACTION:
            return max(ratio, SIMILAR_LINE_RATIO)
    return ratio


def _pair_block(left, right, i1, i2, j1, j2) -> list[DiffRow]:
    """Rows for a block where left[i1:i2] became right[j1:j2]: each left line is paired, in
    order, with the most similar right line still unpaired (if alike enough)."""
    rows: list[DiffRow] = []
    j = j1
    for i in range(i1, i2):
        best, best_score = None, SIMILAR_LINE_RATIO
        for k in range(j, j2):
            score = line_similarity(left[i], right[k])
            if score >= best_score and (best is None or score > best_score):
                best, best_score = k, score
        if best is None:
            rows.append(DiffRow("removed", i + 1, left[i]))
            continue
        rows += [DiffRow("added", right_no=k + 1, right=right[k]) for k in range(j, best)]
        rows.append(DiffRow("changed", i + 1, left[i], best + 1, right[best]))
        j = best + 1
    rows += [DiffRow("added", right_no=k + 1, right=right[k]) for k in range(j, j2)]
    return rows


def _hunks(left: list[str], right: list[str], context: int):
    """difflib's hunks (grouped opcodes) of the change from `left` to `right`."""
    if context < 0:
        raise ValueError(f"context must be 0 or more lines, got {context}")
    matcher = difflib.SequenceMatcher(None, left, right, autojunk=False)
    return list(matcher.get_grouped_opcodes(context))


def _hunk_rows(left, right, group) -> list[DiffRow]:
    rows: list[DiffRow] = []
    for tag, i1, i2, j1, j2 in group:
        if tag == "equal":
            rows += [DiffRow("same", i + 1, left[i], j + 1, right[j])
                     for i, j in zip(range(i1, i2), range(j1, j2))]
            continue
        rows += _pair_block(left, right, i1, i2, j1, j2)
    return rows


def _kept_hunks(left, right, hunks, only_hunks_with) -> list[bool]:
    """For each hunk, whether it is shown: every hunk, or with `only_hunks_with` those that
    change a line (on either side) containing one of its strings."""
    if not only_hunks_with:
        return [True] * len(hunks)
    kept = [any(text in line for tag, i1, i2, j1, j2 in group if tag != "equal"
                for line in left[i1:i2] + right[j1:j2] for text in only_hunks_with)
            for group in hunks]
    if hunks and not any(kept):
        raise ValueError(f"no hunk changes a line containing any of {list(only_hunks_with)}: "
                         f"pass text from a changed line, or no only_hunks_with to see every hunk")
    return kept


def script_diff_lines(a: str | list[str], b: str | list[str], *, context: int = 3,
                      only_hunks_with: tuple[str, ...] = ()) -> list[DiffRow]:
    """Side-by-side rows of the changes from text `a` to text `b`, `context` unchanged lines
    around each change; longer unchanged runs become one "gap" row. [] when identical.

    only_hunks_with: when given, only the hunks that change a line containing one of these
    strings are shown; the others fold into the gap rows, which count their changed rows."""
    left, right = _as_lines(a), _as_lines(b)
    hunks = _hunks(left, right, context)
    if left == right:
        return []
    rows: list[DiffRow] = []
    shown_to, hidden_changes = 0, 0  # left lines before shown_to are shown or counted in a gap
    for group, kept in zip(hunks, _kept_hunks(left, right, hunks, only_hunks_with)):
        if not kept:
            hidden_changes += sum(r.kind != "same" for r in _hunk_rows(left, right, group))
            continue
        first_left = group[0][1]
        if first_left > shown_to or hidden_changes:
            rows.append(DiffRow("gap", hidden=first_left - shown_to, hidden_changes=hidden_changes))
        rows += _hunk_rows(left, right, group)
        shown_to, hidden_changes = group[-1][2], 0
    if shown_to < len(left) or hidden_changes:
        rows.append(DiffRow("gap", hidden=len(left) - shown_to, hidden_changes=hidden_changes))
    return rows


def unified_diff_text(a: str, b: str, left_label: str, right_label: str, *, context: int = 3,
                      only_hunks_with: tuple[str, ...] = ()) -> str:
    """The unified diff of `a` to `b` (as `diff -u` writes it), only the hunks
    script_diff_lines shows with the same arguments; "" when identical."""
    left, right = a.splitlines(True), b.splitlines(True)
    if not only_hunks_with:
        return "".join(difflib.unified_diff(left, right, left_label, right_label, n=context))
    bare_left, bare_right = _as_lines(left), _as_lines(right)
    out = []
    hunks = _hunks(bare_left, bare_right, context)
    for group, kept in zip(hunks, _kept_hunks(bare_left, bare_right, hunks, only_hunks_with)):
        if not kept:
            continue
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        out.append(f"@@ -{_unified_range(i1, i2)} +{_unified_range(j1, j2)} @@\n")
        for tag, a1, a2, b1, b2 in group:
            out += [" " + line for line in left[a1:a2]] if tag == "equal" else []
            out += ["-" + line for line in left[a1:a2]] if tag in ("replace", "delete") else []
            out += ["+" + line for line in right[b1:b2]] if tag in ("replace", "insert") else []
    return "".join([f"--- {left_label}\n", f"+++ {right_label}\n"] + out) if out else ""


def _unified_range(start: int, stop: int) -> str:
    """A hunk header's range, as difflib.unified_diff writes it ("3", "3,4", "2,0")."""
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start if length == 0 else start + 1},{length}"


# Colours and layout are inline styles: JupyterLab applies them (they also override its
# right-aligned, zebra-striped table style). GitHub's notebook view strips every style
# attribute and <style> block, so the change is also carried by what survives sanitising: a
# -/+ marker column, bold changed lines, <code> for a monospace font, and indentation as
# non-breaking spaces (a <pre> per cell would keep it too, but GitHub boxes and pads each one).
_LEFT_BG = {"changed": "#ffebe9", "removed": "#ffebe9"}
_RIGHT_BG = {"changed": "#e6ffec", "added": "#e6ffec"}
_CELL = "text-align:left;vertical-align:top;padding:0 4px;border:none"


def _code_html(text: str) -> str:
    """Escaped code whose indentation survives HTML whitespace collapsing."""
    body = text.lstrip(" ")
    return "&nbsp;" * (len(text) - len(body)) + html.escape(body)


def _cell_pair(number: int | None, marker: str, text: str, background: str | None, strong: bool):
    style = _CELL + (f";background:{background}" if background else "")
    code = (f'<code style="background:transparent;padding:0;font-size:12px">{_code_html(text)}</code>'
            if text.strip() else "&nbsp;")
    if strong and text.strip():
        code = f"<b>{code}</b>"
    no = "" if number is None else str(number)
    return (f'<td style="{style};color:#57606a;text-align:right">{no}</td>'
            f'<td style="{style}"><b>{marker}</b></td>'
            f'<td style="{style}">{code}</td>')


def render_diff_html(rows: list[DiffRow], left_label: str, right_label: str) -> str:
    """An HTML table of `rows` that reads with or without CSS (see the comment above)."""
    if not rows:
        return f"<p><code>{html.escape(left_label)}</code> and <code>{html.escape(right_label)}</code> are identical.</p>"
    shown = sum(r.kind != "same" and r.kind != "gap" for r in rows)
    changed = shown + sum(r.hidden_changes for r in rows)
    out = ['<table style="border-collapse:collapse;font-size:12px">',
           f'<tr><th colspan="3" style="text-align:left">- {html.escape(left_label)}</th>'
           f'<th colspan="3" style="text-align:left">+ {html.escape(right_label)}</th></tr>']
    for row in rows:
        if row.kind == "gap":
            out.append(f'<tr><td colspan="6" style="text-align:center;color:#57606a">'
                       f'<i>… {_gap_text(row)} …</i></td></tr>')
            continue
        differs = row.kind != "same"
        left_marker = "-" if row.kind in ("changed", "removed") else ""
        right_marker = "+" if row.kind in ("changed", "added") else ""
        out.append("<tr>"
                   + _cell_pair(row.left_no, left_marker, row.left, _LEFT_BG.get(row.kind), differs)
                   + _cell_pair(row.right_no, right_marker, row.right, _RIGHT_BG.get(row.kind), differs)
                   + "</tr>")
    some = f", {shown} of them shown" if shown < changed else ""
    out.append(f'</table><p><i>{changed} line{"s" * (changed != 1)} differ{some}.</i></p>')
    return "\n".join(out)


def _gap_text(row: DiffRow) -> str:
    if row.hidden_changes:  # hunks left out: their changes, not their lines, are what is missing
        return f'{row.hidden_changes} changed line{"s" * (row.hidden_changes != 1)} not shown'
    return f'{row.hidden} unchanged line{"s" * (row.hidden != 1)}'


class ScriptDiff(HTML):
    """An HTML display object whose plain-text form is the unified diff (for terminals, and
    for readers whose viewer shows text/plain)."""

    def __init__(self, html_text: str, unified: str):
        super().__init__(html_text)
        self.unified = unified

    def __repr__(self) -> str:
        return self.unified


def _label(path) -> str:
    """Repo-relative (the same on every machine); a file outside the repo by its name."""
    shown = repo_relative(path)
    if Path(shown).is_absolute():  # e.g. a workspace that links to the repo (the browser test's)
        shown = repo_relative(Path(path).resolve())
    return Path(path).name if Path(shown).is_absolute() else shown


def show_script_diff(a_path, b_path, *, context: int = 3,
                     only_hunks_with: tuple[str, ...] = ()) -> ScriptDiff:
    """The changes from script `a_path` to `b_path`, side by side, for display in a notebook.

    only_hunks_with: show only the hunks that change a line containing one of these strings
    (the rest fold into counted gaps), e.g. the training loop's and main()'s, not the imports'."""
    texts = []
    for p in (Path(a_path), Path(b_path)):
        if not p.is_file():
            raise FileNotFoundError(
                f"{p} not found (cwd {Path.cwd()}): the training scripts are in mnist_mlp/ at "
                f"the repo root; from a notebook pass e.g. '../mnist_mlp/train.py'")
        texts.append(p.read_text())
    left_label, right_label = _label(a_path), _label(b_path)
    only = tuple(only_hunks_with)
    rows = script_diff_lines(texts[0], texts[1], context=context, only_hunks_with=only)
    unified = unified_diff_text(texts[0], texts[1], left_label, right_label, context=context,
                                only_hunks_with=only)
    return ScriptDiff(render_diff_html(rows, left_label, right_label),
                      unified or f"{left_label} and {right_label} are identical")
