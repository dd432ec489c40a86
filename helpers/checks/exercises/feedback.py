"""What every exercise check returns: Feedback, and the helpers the checks share.

Each check measures the truth itself (a real loader, real compile counts, real BF16 arithmetic)
and returns Feedback: "Not yet" while the exercise is untouched (the committed state), "Not
quite" with a hint when the answer is wrong, "Correct" with why. An untouched exercise shows no
hint: the text says one comes after a first answer, the HTML keeps it folded in a closed
<details> (the website's reader opens it on purpose). A check never raises on a learner's
answer, so an unfinished exercise never stops Run All.
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass

NOT_YET, WRONG, RIGHT = "Not yet", "Not quite", "Correct"
HINT_LATER = "A hint appears after your first answer."
HINT_FOLDED = "Hint, for after a first try (click to open)"
_COLOURS = {NOT_YET: "#57606a", WRONG: "#9a6700", RIGHT: "#1a7f37"}


@dataclass(frozen=True)
class Feedback:
    exercise: str
    verdict: str  # NOT_YET, WRONG or RIGHT
    message: str
    hint: str = ""

    @property
    def ok(self) -> bool:
        return self.verdict == RIGHT

    def __str__(self) -> str:
        text = f"{self.exercise} - {self.verdict}: {self.message}"
        if self.hint and self.verdict == WRONG:
            return f"{text}\nHint: {self.hint}"
        return text + (f"\n{HINT_LATER}" if self.hint and self.verdict == NOT_YET else "")

    __repr__ = __str__

    def _repr_html_(self) -> str:
        colour = _COLOURS[self.verdict]
        hint = ""
        if self.hint and self.verdict == WRONG:
            hint = f"<div><b>Hint:</b> {html.escape(self.hint)}</div>"
        elif self.hint and self.verdict == NOT_YET:  # folded: seen only by a reader who opens it
            hint = (f"<details><summary>{HINT_FOLDED}</summary>{html.escape(self.hint)}"
                    "</details>")
        return (f'<div style="border-left:6px solid {colour};padding:4px 10px">'
                f'<b>{html.escape(self.exercise)}</b> · <b style="color:{colour}">{self.verdict}</b>: '
                f'{html.escape(self.message)}{hint}</div>')


def number(value) -> float | None:
    """The learner's answer as a number, or None when it is not one (still a placeholder)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def judge_exact(name: str, predicted, truth, hint: str, *, variable: str, right: str,
                wrong) -> Feedback:
    """A learner's number against the true one: Not yet while `variable` is unset, Correct when
    equal, else Not quite with wrong(guess) and the hint."""
    guess = number(predicted)
    if guess is None:
        return Feedback(name, NOT_YET, f"set {variable}, then run this cell.", hint)
    if guess == truth:
        return Feedback(name, RIGHT, right)
    return Feedback(name, WRONG, wrong(guess), hint)


