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


def test_between_includes_both_ends_and_the_comparisons_their_bound(capsys):
    """`between` is [low, high]: a value on either end holds, just outside does not. `>=` and
    `<=` hold at the bound, `>` and `<` do not: the bound a notebook writes is the one it means."""
    check("loss", 0.2, "between", (0.2, 0.4))
    check("loss", 0.4, "between", (0.2, 0.4))
    check("accuracy", 0.92, ">=", 0.92)
    check("seconds", 30, "<=", 30)
    check("graphs", 2, "!=", 1)
    assert capsys.readouterr().out.splitlines() == [
        "✓ loss 0.2 in [0.2, 0.4]", "✓ loss 0.4 in [0.2, 0.4]", "✓ accuracy 0.92 ≥ 0.92",
        "✓ seconds 30 ≤ 30", "✓ graphs 2 ≠ 1"]
    refused = [("loss", 0.19, "between", (0.2, 0.4), "✗ loss 0.19 outside [0.2, 0.4]"),
               ("loss", 0.41, "between", (0.2, 0.4), "✗ loss 0.41 outside [0.2, 0.4]"),
               ("accuracy", 0.92, ">", 0.92, "✗ accuracy 0.92 ≤ 0.92"),
               ("seconds", 30, "<", 30, "✗ seconds 30 ≥ 30"),
               ("seconds", 31, "<=", 30, "✗ seconds 31 > 30"),
               ("graphs", 2, "==", 1, "✗ graphs 2 ≠ 1"),
               ("graphs", 1, "!=", 1, "✗ graphs 1 = 1"),
               ("graphs", 3, "in", frozenset({1, 2}), "✗ graphs 3 not in {1, 2}")]
    for label, value, op, bound, message in refused:
        with pytest.raises(CheckFailed) as err:
            check(label, value, op, bound)
        assert str(err.value) == message
    assert capsys.readouterr().out == ""


def test_a_unit_follows_the_value_and_the_bound(capsys):
    check("step time", 5, "<", 10, unit=" ms")
    assert capsys.readouterr().out == "✓ step time 5 ms < 10 ms\n"
    with pytest.raises(CheckFailed, match=r"^✗ step time 12 ms outside \[1, 10\] ms\. profile it$"):
        check("step time", 12, "between", (1, 10), unit=" ms", hint="profile it")


def test_show_keeps_what_is_not_a_plain_number():
    assert [show(v) for v in (True, None, 1e-05, float("inf"), 999.0, (1, 2.5), {3, 1},
                              "text", range(5, 6))] == [
        "True", "None", "1e-05", "inf", "999", "[1, 2.5]", "{1, 3}", "text", "5"]


def test_show_groups_thousands_from_1000_and_brackets_only_pairs_of_numbers():
    assert [show(v) for v in (1000.0, -1000.0, (1, 2, 3), (1, "a"))] == [
        "1,000", "-1,000", "(1, 2, 3)", "(1, 'a')"]


def test_the_failure_messages_say_exactly_what_failed():
    with pytest.raises(CheckFailed) as err:
        check("same predictions", False)
    assert str(err.value) == "✗ same predictions: it does not hold"
    with pytest.raises(CheckFailed) as err:
        check("same predictions", False, hint="reload the checkpoint")
    assert str(err.value) == "✗ same predictions: it does not hold. reload the checkpoint"
    with pytest.raises(ValueError) as err:
        check("accuracy", 0.9, "=>", 0.5)
    assert str(err.value) == ("check('accuracy'): unknown operator '=>'; use one of "
                              "==, !=, >=, >, <=, <, in or 'between'")


def test_a_label_alone_is_a_check_that_holds(capsys):
    check("the run finished")
    assert capsys.readouterr().out == "✓ the run finished\n"


def test_a_check_the_platform_double_cannot_decide_is_reported_and_the_notebook_runs_on(
        tmp_path, monkeypatch, capsys):
    """Only a test double's tree names such checks (platform_paths.undecidable_checks); on a real
    machine (no WORKBOOK_PLATFORM_ROOT) the same check raises as always."""
    import json

    label = "a recipe's accuracy gap"
    with pytest.raises(CheckFailed):
        check(label, 0.3, "<=", 0.01)
    (tmp_path / "etc/workbook").mkdir(parents=True)
    (tmp_path / "etc/workbook/undecidable-checks.json").write_text(json.dumps({label: "no such hardware"}))
    monkeypatch.setenv("WORKBOOK_PLATFORM_ROOT", str(tmp_path))
    check(label, 0.3, "<=", 0.01)
    check(label, False)
    assert capsys.readouterr().out.splitlines() == [
        f"? {label} 0.3 > 0.01: undecided here (no such hardware)",
        f"? {label}: does not hold, undecided here (no such hardware)"]
    with pytest.raises(CheckFailed):
        check("any other check", 0.3, "<=", 0.01)
