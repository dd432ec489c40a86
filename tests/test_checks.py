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
        "✓ test accuracy 0.93 ≥ 0.92", "✓ steps 7,500 = 7,500", "✓ graphs compiled 1 in {1, 2}",
        "✓ loss 0.31 in [0.2, 0.4]", "✓ the reloaded model predicts the same"]


def test_a_check_that_fails_raises_an_assertion_with_the_hint(capsys):
    with pytest.raises(CheckFailed, match=r"^✗ test accuracy 0.81 < 0.92\. train longer$"):
        check("test accuracy", 0.81, ">=", 0.92, hint="train longer")
    with pytest.raises(AssertionError, match="✗ loss 0.50 outside"):
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
        "✓ loss 0.20 in [0.2, 0.4]", "✓ loss 0.40 in [0.2, 0.4]", "✓ accuracy 0.92 ≥ 0.92",
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
        f"? {label} 0.30 > 0.01: undecided here (no such hardware)",
        f"? {label}: does not hold, undecided here (no such hardware)"]
    with pytest.raises(CheckFailed):
        check("any other check", 0.3, "<=", 0.01)


def test_a_measured_float_prints_coarser_than_a_cpu_kind_moves_it(capsys):
    """A CPU with AVX-512 kernels and one with AVX2 ones, or another thread count, read a test
    accuracy 0.9306 and 0.9305, a loss 0.2421 and 0.2422, a BF16 accuracy gap 0.0035 and 0.0032:
    each pair prints the same line. The comparison still uses the full value."""
    pairs = [("test accuracy", (0.9305, 0.9306), ">=", 0.92),
             ("mean of the last 10 losses read", (0.2421, 0.2422), "<", 2.31734 / 3),
             ("larger test-accuracy gap", (0.0032, 0.0058), "<=", 0.01),
             ("largest difference", (0.0, 5.96e-08), "<", 1e-05)]
    for label, values, op, bound in pairs:
        for value in values:
            check(label, value, op, bound)
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["✓ test accuracy 0.93 ≥ 0.92"] * 2 + ["✓ mean of the last 10 losses read 0.24 < 0.77"] * 2 + [
        "✓ larger test-accuracy gap 0.00 ≤ 0.01"] * 2 + ["✓ largest difference 0 < 1e-05"] * 2
    with pytest.raises(CheckFailed, match=r"^✗ test accuracy 0.92 < 0.92$"):
        check("test accuracy", 0.9199, ">=", 0.92)  # shown rounded, decided on the full value


def test_a_bound_as_written_sets_a_finer_resolution_a_computed_bound_none():
    from helpers.checks import written_decimals

    assert [written_decimals(b) for b in (0.92, 0.01, 1e-06, 0.0001, 0.795, 30, 2.0, 0.7724333)] == [
        2, 2, 6, 4, 3, 0, 0, None]
    assert [written_decimals(b) for b in (True, "0.9", float("nan"))] == [None, None, None]


def test_show_measured_rounds_to_places_and_four_significant_digits():
    from helpers.checks import show_measured

    assert [show_measured(v, d) for v, d in ((0.7996, 3), (-0.001, 2), (1234.567, 2), (3e-7, 6),
                                             (2e-6, 6), (0.0, 3), (float("inf"), 2), (0.0099, 2),
                                             (0.01, 2), (-0.02, 2))] == [
        "0.800", "0.00", "1,235", "0", "2e-06", "0.000", "inf", "0.00", "0.01", "-0.02"]


def test_equality_and_membership_show_the_value_whole(capsys):
    check("mean weight, round to nearest", 1.0, "==", 1.0)
    check("share", 0.25, "in", {0.25, 0.5})
    assert capsys.readouterr().out.splitlines() == ["✓ mean weight, round to nearest 1 = 1",
                                                    "✓ share 0.25 in {0.25, 0.5}"]
