"""helpers/inside/payoff.py, notebook 07's arithmetic: the step's FLOPs counted from the model itself,
the NeuronCore model against the tutorial's own figures, the crossover, and the plot's limits."""
import pytest
from torch import nn

from helpers.inside import payoff
from mnist_mlp.model import MLP
from tests.xla_stand_in import stand_in_device

DEVICE = stand_in_device()  # before any CPU backward of this process (tests/xla_stand_in.py)


def counted_from_the_model(batch, widths):
    """FLOPs from the model's own nn.Linear layers: forward, weight gradient, input gradient
    (none for the first layer, whose input is the images)."""
    layers = [m for m in MLP(layers=widths).modules() if isinstance(m, nn.Linear)]
    return sum(2 * batch * m.in_features * m.out_features * (2 if i == 0 else 3)
               for i, m in enumerate(layers))


@pytest.mark.parametrize("batch, widths", [(32, (120, 84)), (1024, (512, 256)), (7, (3000, 5))])
def test_flops_match_the_models_own_layers(batch, widths):
    assert payoff.matmul_flops(batch, widths) == counted_from_the_model(batch, widths)


def test_batch_32_is_about_14_mflop_and_the_6np_rule_gives_about_20():
    flops = payoff.matmul_flops(32)
    assert 14.0e6 < flops < 14.2e6
    assert payoff.parameter_count() == sum(p.numel() for p in MLP().parameters())
    assert 6 * payoff.parameter_count() * 32 == pytest.approx(20.2e6, rel=0.01)


def test_each_term_comes_from_its_cited_figure():
    terms = payoff.model_terms()
    assert terms["peak_flops"] == 47.5e12 / 2
    assert payoff.model_terms("bf16")["peak_flops"] == 4 * terms["peak_flops"]
    # the fixed cost: the one-worker step less its products; the loader at most the CPU's step
    assert terms["fixed_s"] == pytest.approx(1 / 192.43508922834008 - payoff.matmul_flops(32) / 23.75e12)
    assert terms["loader_max_s"] == pytest.approx(1 / 286.96994718801335)
    assert terms["low"].fixed_s == pytest.approx(terms["fixed_s"] - terms["loader_max_s"])
    assert terms["high"] == payoff.model_from_tutorial()
    # the gradients (105,214 FP32 numbers, 420,856 bytes) fit the 1 MiB row, not the 256 KiB one
    assert payoff.parameter_count() * 4 == 420_856 and terms["allreduce_s"] == 68e-6


def test_the_all_reduce_picks_the_smallest_listed_size_that_holds_the_gradients():
    from helpers.inside.core_model import allreduce_s
    from helpers.show.cost import load_cost_data

    data = load_cost_data()
    assert allreduce_s(data, widths=(64, 32)) == 60e-6  # 52,138 parameters: 208 KB fit 256 KiB
    with pytest.raises(StopIteration):
        allreduce_s(data, widths=(4096, 4096))  # 70 MB: larger than any size listed


def test_the_held_out_prediction_is_computed_not_copied():
    terms = payoff.model_terms()
    held = payoff.two_worker_prediction(terms)
    step_1w = 1 / 192.43508922834008
    assert held["predicted_it_s"] == pytest.approx(1 / (step_1w + 68e-6))
    assert held["published_it_s"] == pytest.approx(163.25353269069706)
    assert 0.15 < held["off"] < 0.18  # optimistic: it misses most of what two workers lose
    assert held["unexplained_s"] == pytest.approx(1 / 163.25353269069706 - (step_1w + 68e-6))
    # without the all-reduce the model is about as close: this figure cannot test that term
    assert held["without_allreduce_it_s"] == pytest.approx(192.43508922834008)
    assert held["off_without"] == pytest.approx(192.43508922834008 / 163.25353269069706 - 1)
    assert held["off_without"] - held["off"] < 0.02
    assert held["lost_s"] == pytest.approx(1 / 163.25353269069706 - step_1w)
    text = payoff.describe_held_out(held, terms)
    assert "+16.4% on the tutorial's 163" in text and "without the all-reduce 192 it/s, +17.9%" in text
    assert "two workers lose 0.93 ms a step; the all-reduce term explains 0.068 ms" in text


def test_figures_carry_the_tutorials_own_labels():
    rows = {r[0]: r for r in payoff.figure_rows()}
    assert rows["train_cpu.py, host CPU"][1:] == ["287", "3.48", "not stated"]
    assert rows["torchrun, 1 worker, MpDeviceLoader"][1:] == ["192", "5.20", "not stated"]
    assert rows["torchrun, 2 workers (per worker)"][3] == "trn1.32xlarge"
    assert rows["train.py, one NeuronCore, no MpDeviceLoader"][3] == "trn1.32xlarge"
    chip = {r[0]: r for r in payoff.chip_rows()}  # images/s from the it/s as printed
    assert chip["two NeuronCores, two workers"][1:] == ["2 x 163", "10,432", "1.14x"]
    assert chip["one NeuronCore"][1:] == ["192", "6,144", "0.67x"]
    assert chip["host CPU, one process"][1:] == ["287", "9,184", "1.00x"]
    terms = {r[0].strip(): r for r in payoff.describe_terms(payoff.model_terms())}
    assert terms["other overhead"][1] == "1.71 to 5.20 ms"
    assert terms["this MLP's gradients"][1:] == ["0.4 MB", "105,214 FP32 parameters"]


def sample_terms(low_s=0.002, high_s=0.005, peak=1e13):
    return {"low": payoff.NeuronCoreModel(low_s, peak), "high": payoff.NeuronCoreModel(high_s, peak)}


def test_crossing_interpolates_between_the_points_that_bracket_it():
    widths = (120, 84)
    core = payoff.NeuronCoreModel(fixed_s=0.004, peak_flops=1e30)  # all fixed cost
    cpu = {(32, widths): 0.001, (512, widths): 0.002, (2048, widths): 0.008}
    # 0.002 -> 0.008 over 512 -> 2048 (log-log slope 1): 0.004 is met at batch 1024
    assert payoff.crossing(cpu, core, widths=widths) == pytest.approx(1024)
    assert payoff.crossing(cpu, payoff.NeuronCoreModel(0.0005, 1e30), widths=widths) == 0
    assert payoff.crossing(cpu, payoff.NeuronCoreModel(0.01, 1e30), widths=widths) is None
    with pytest.raises(ValueError, match="no measured point"):
        payoff.crossing(cpu, core, batch=99)


def test_the_crossover_range_and_its_sentence():
    widths = (120, 84)
    cpu = {(32, widths): 0.001, (512, widths): 0.003, (2048, widths): 0.02, (8192, widths): 0.08}
    terms = sample_terms()
    found = payoff.crossover_range(cpu, terms, widths=widths)
    assert 32 < found["from"] < 512 < found["to"] < 2048
    assert found["largest"] == (8192, widths)
    assert found["speedup"] == pytest.approx((0.08 / terms["high"].step_s(8192, widths),
                                              0.08 / terms["low"].step_s(8192, widths)))
    text = payoff.describe_crossover(found, "batch")
    fastest = 0.08 / terms["low"].step_s(8192, widths)
    assert "from about batch" in text and "at batch 8192 it would be up to ~" in text
    assert f"up to ~{float(f'{fastest:.1g}'):g}x the CPU if the core ran at FP32 peak" in text
    wide = {(512, (w, w)): s for w, s in ((256, 0.001), (1024, 0.01))}
    text = payoff.describe_crossover(payoff.crossover_range(wide, terms, batch=512), "width")
    assert "from about width 411" in text and "at width 1024 it would be up to ~" in text
    early = payoff.crossover_range(cpu, sample_terms(low_s=0.0005), widths=widths)
    assert early["from"] == 0 and "from the smallest batch measured" in payoff.describe_crossover(early, "batch")


def test_where_the_core_wins_for_a_given_fixed_cost():
    widths = (1024, 1024)
    per_image = payoff.matmul_flops(1, widths)
    batch = payoff.core_wins_from_batch(0.003, widths, 1e11, 1e13)
    assert batch == pytest.approx(0.003 / (per_image / 1e11 - per_image / 1e13))
    assert batch * per_image / 1e11 == pytest.approx(0.003 + batch * per_image / 1e13)
    assert payoff.core_wins_from_batch(0.003, widths, 2e13, 1e13) is None


def test_the_device_line_runs_through_two_points_and_predicts_the_others():
    widths = payoff.TUTORIAL_WIDTHS
    f32, f2048 = payoff.matmul_flops(32), payoff.matmul_flops(2048)
    rate, fixed = 1e11, 0.002
    device = {(32, widths): fixed + f32 / rate, (2048, widths): fixed + f2048 / rate,
              (512, (1024, 1024)): 0.5}
    line = payoff.device_line(device)
    assert line.fixed_s == pytest.approx(fixed) and line.peak_flops == pytest.approx(rate)
    predicted = fixed + payoff.matmul_flops(512, (1024, 1024)) / rate
    cpu = {(32, widths): 0.001, (512, widths): 0.004, (2048, widths): 0.02}
    terms = payoff.model_terms()
    text = payoff.describe_measured(cpu, device, terms, "the device")
    low, high = (terms[end].step_s(512, (1024, 1024)) * 1e3 for end in ("low", "high"))
    assert (f"batch 512, widths 1024/1024: 500.00 ms (the band: {low:.2f} to {high:.2f}); "
            f"the line below predicts {predicted * 1e3:.2f}") in text
    assert "batch 32, widths 120/84: 2.14 ms (the band: 1.71 to 5.20)\n" in text
    assert "points: 2.00 ms a step plus FLOPs at 0.1 TFLOP/s (the model: 23.75 TFLOP/s)" in text
    # at 512 the line (4.26 ms) is above the CPU, at 2048 (11.0 ms) below: they cross between
    assert 512 < payoff.crossing(cpu, line, widths=widths) < 2048
    assert "by batch, measured: the device overtakes this CPU from about batch" in text
    flat = payoff.device_line({(32, widths): 0.003, (2048, widths): 0.0029})
    assert flat.fixed_s == 0.003 and flat.step_s(8192) == 0.003  # the larger step was no slower
    with pytest.raises(ValueError, match="two batch sizes"):
        payoff.device_line({(32, widths): 0.003})


def test_a_new_shape_on_the_device_is_one_new_graph():
    from mnist_mlp.common.xla_metrics import read_compile_metrics

    before = read_compile_metrics()["UncachedCompile"]
    seconds = payoff.device_step_s(DEVICE, 24, (16, 8), steps=2, warmup=1)  # a shape of its own
    after = read_compile_metrics()["UncachedCompile"]
    assert seconds > 0 and after - before == 1
    payoff.device_step_s(DEVICE, 24, (16, 8), steps=2, warmup=1)
    assert read_compile_metrics()["UncachedCompile"] == after, "the same shape: no new graph"


def test_the_plot_has_two_panels_and_at_most_five_legend_entries():
    import matplotlib

    matplotlib.use("Agg")
    widths = payoff.TUTORIAL_WIDTHS
    cpu = {(32, widths): 0.001, (512, widths): 0.003, (512, (256, 256)): 0.004}
    fig = payoff.plot_payoff(cpu, {(32, widths): 0.002}, payoff.model_terms(), "device", 512)
    assert len(fig.axes) == 2 and len(fig.legends) == 1
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(labels) == len(set(labels)) <= 5, labels
    assert "AWS tutorial: host CPU, with its loader" in labels
    assert "AWS tutorial: one NeuronCore, the model's fit point" in labels
    # the width panel's first point is the tutorial's 120/84, not 120/120
    assert [t.get_text() for t in fig.axes[1].get_xticklabels()] == ["120/84", "256"]
