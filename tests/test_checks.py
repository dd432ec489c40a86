"""helpers.checks.check: the one-line notebook check prints what holds and raises when not."""
import pytest

from helpers.checks import CheckFailed, check, show


def test_a_check_that_holds_prints_one_line(capsys):
    check("test accuracy", 0.9305, ">=", 0.92)
    check("steps", 7500, "==", 7500)
    check("graphs compiled", 1, "in", frozenset({1, 2}))
    check("loss", 0.31, "between", (0.2, 0.4))
    check("the reloaded model predicts the same", True)
    assert capsys.readouterr().out.splitlines() == [
        "✓ test accuracy 0.9305 ≥ 0.92", "✓ steps 7,500 = 7,500", "✓ graphs compiled 1 in {1, 2}",
        "✓ loss 0.31 in [0.2, 0.4]", "✓ the reloaded model predicts the same"]


def test_a_check_that_fails_raises_an_assertion_with_the_hint(capsys):
    with pytest.raises(CheckFailed, match=r"^✗ test accuracy 0.81 < 0.92\. train longer$"):
        check("test accuracy", 0.81, ">=", 0.92, hint="train longer")
    with pytest.raises(AssertionError, match="✗ loss 0.5 outside"):
        check("loss", 0.5, "between", (0.2, 0.4))
    with pytest.raises(AssertionError, match="✗ same predictions: it does not hold"):
        check("same predictions", False)
    assert capsys.readouterr().out == ""  # nothing claims success


def test_a_malformed_check_is_refused_not_passed():
    with pytest.raises(TypeError, match="truth value"):
        check("accuracy", 0.9)  # a number alone is not a verdict
    with pytest.raises(ValueError, match="unknown operator '=>'"):
        check("accuracy", 0.9, "=>", 0.5)


def test_numbers_read_as_a_learner_reads_them():
    assert [show(v) for v in (60000, 0.93051, 241.003, 2048.0, range(0, 1), range(1, 3))] == [
        "60,000", "0.9305", "241", "2,048", "0", "1–2"]
