"""helpers/show/cost.py and its data file: every figure has its source and date, the arithmetic of
time and cost per epoch, and a clear error for a data file that lacks them."""
import json
import math

import pytest

from helpers.show.cost import (
    COST_DATA,
    NOT_STATED,
    at_learners_rate,
    cost_rows,
    epoch_seconds,
    format_cost_rows,
    load_cost_data,
    price,
    stand_in_epoch_times,
    steps_per_epoch,
    unpriced_runs,
)
from mnist_mlp.common.results import RunResults


def test_every_price_and_published_figure_is_sourced_and_dated():
    data = load_cost_data()
    for entry in data["prices"]:
        assert entry["source"].startswith("https://") and entry["as_of"][:2] == "20"
    for run in data["published_runs"]:
        assert run["source"].startswith("https://awsdocs-neuron.readthedocs-hosted.com/en/v2.31.0/")
        if run["instance"] != NOT_STATED:
            price(run["instance"], data)  # each instance the tutorial names has a rate
    # the instance as the tutorial labels each log: "not stated" where it names none
    for run in [*data["published_runs"], data["published_cpu_it_s"]]:
        assert (run["instance"] == NOT_STATED) == run["tutorial_label"].startswith(NOT_STATED), run
    assert "/en/latest/" not in COST_DATA.read_text()
    assert price().usd_per_hour == 1.34 and "neuron-workshops" in price().cite()
    assert "aws-neuron-sdk/blob/v2.31.0/" in price("trn1.32xlarge").cite()


def test_steps_and_time_per_epoch():
    assert steps_per_epoch(1) == 1875 and steps_per_epoch(2) == 937
    assert epoch_seconds(187.5, 1) == pytest.approx(10.0)
    assert math.isnan(epoch_seconds(float("nan"), 1)) and math.isnan(epoch_seconds(0, 1))


def result(stage, throughput, workers=1):
    return RunResults(stage=stage, backend="neuron", world_size=workers, epochs=1, steps=1875,
                      batch_size=32, lr=0.01, loader="fast", throughput_it_s=throughput,
                      final_loss=0.3, test_accuracy=0.9, wall_time_s=20.0, loss_history=[])


def test_each_run_is_priced_at_its_own_instance_and_the_stand_in_at_none():
    results = {"xla": result("xla", 187.5), "torchrun_w2": result("torchrun_w2", 150.0, workers=2)}
    stand_in = cost_rows(results, on_neuron=False)
    assert {r["instance"] for r in stand_in} == {"trn1.32xlarge"}, "only the published runs"
    neuron = cost_rows(results, on_neuron=True)
    mine = {r["what"]: r for r in neuron if r["instance"] == "trn1.2xlarge"}
    assert mine["xla"]["usd_per_epoch"] == pytest.approx(10.0 * 1.34 / 3600)
    assert mine["torchrun_w2"]["epoch_s"] == pytest.approx(937 / 150.0)
    published = [r for r in neuron if r["instance"] == "trn1.32xlarge"]
    assert [r["workers"] for r in published] == [1, 2]  # the 192 it/s log names no instance
    assert all(r["usd_per_epoch"] == pytest.approx(r["epoch_s"] * 8.197 / 3600) for r in published)
    assert {r["instance"] for r in neuron} == {"trn1.2xlarge", "trn1.32xlarge"}
    assert unpriced_runs() == ("Not priced, the tutorial names no instance for it: "
                               "torchrun 1 worker, MpDeviceLoader (192 it/s)")
    assert "xla 10.0 s" in stand_in_epoch_times(results) and stand_in_epoch_times({}) == ""
    learner = at_learners_rate(stand_in)  # the published trn1.32xlarge epochs at $1.34/h
    epoch_s = {r["what"]: r["epoch_s"] for r in stand_in}["torchrun 2 workers"]
    assert f"torchrun 2 workers ${epoch_s * 1.34 / 3600:.4f}" in learner and "$1.34/h on demand" in learner
    assert "github.com/aws-neuron/neuron-workshops" in learner  # the rate cited
    assert learner.startswith("Modelled, not measured: ")  # a projection, labelled where it is shown
    assert at_learners_rate([r for r in neuron if r["instance"] == "trn1.2xlarge"]) == ""


def test_a_run_without_a_stated_instance_is_left_out_not_priced_at_a_guess():
    data = load_cost_data()
    data["published_runs"][0]["instance"] = NOT_STATED
    assert [r["what"] for r in cost_rows({}, on_neuron=False, data=data)] == ["torchrun 2 workers"]
    assert "train.py, sync every step (95 it/s); torchrun 1 worker" in unpriced_runs(data)
    for run in data["published_runs"]:
        run["instance"] = "trn1.32xlarge"
    assert unpriced_runs(data) == ""


def test_the_table_fits_100_characters_and_has_no_empty_rows():
    results = {"torchrun_w1": result("torchrun_w1", 187.5)}
    table = format_cost_rows(cost_rows(results, on_neuron=True))
    lines = table.splitlines()
    assert max(map(len, lines)) <= 100, table
    assert len(lines) == 2 + 1 + 2 and "n/a" not in table and "nan" not in table
    assert "$1.34/h on demand" in table and "$8.197/h RI-effective" in table


@pytest.mark.parametrize("edit, says", [
    (lambda d: d["prices"][0].pop("source"), "prices[0] lacks source"),
    (lambda d: d["published_runs"][1].pop("throughput_it_s"), "published_runs[1] lacks throughput_it_s"),
    (lambda d: d.update(prices=[]), "prices[0] lacks"),
])
def test_a_figure_without_its_source_is_refused(tmp_path, edit, says):
    data = load_cost_data()
    edit(data)
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=says.replace("[", r"\[").replace("]", r"\]")):
        load_cost_data(path)


def test_unreadable_file_and_unknown_instance_say_what_to_do(tmp_path):
    bad = tmp_path / "costs.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="cannot read the cost data"):
        load_cost_data(bad)
    with pytest.raises(KeyError, match="add one, with its source and date"):
        price("trn2.48xlarge")


def test_a_trn1_figure_names_the_instance_its_log_names():
    from helpers.show import trn1_figure

    assert trn1_figure("xla") == "95 it/s, the AWS MLP tutorial's log labelled trn1.32xlarge"
    assert trn1_figure("torchrun_w2") == "163 it/s per worker, the AWS MLP tutorial's log labelled trn1.32xlarge"
    assert trn1_figure("torchrun_w1").endswith("log which names no instance")
    with pytest.raises(KeyError, match="logs no 'bf16_fp32' run"):
        trn1_figure("bf16_fp32")
