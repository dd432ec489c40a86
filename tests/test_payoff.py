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


def test_the_model_meets_the_tutorial_within_25_percent_or_says_why_not():
    core = payoff.model_from_tutorial()
    assert core.peak_flops == 47.5e12 / 2
    rows = {r["stage"]: r for r in payoff.against_the_tutorial(core)}
    assert rows["torchrun_w1"]["off"] == pytest.approx(0, abs=1e-9)
    assert rows["torchrun_w2"]["within_25"] and 0.15 < rows["torchrun_w2"]["off"] < 0.2
    assert not rows["xla"]["within_25"] and "waits for every step" in rows["xla"]["why"]
    assert payoff.model_from_tutorial("bf16").peak_flops == 4 * core.peak_flops


def test_crossover_brackets_the_first_win_and_says_when_there_is_none():
    core = payoff.NeuronCoreModel(fixed_s=0.005, peak_flops=1e13)
    widths = (120, 84)
    cpu = {(32, widths): 0.001, (512, widths): 0.003, (2048, widths): 0.02, (8192, widths): 0.08}
    found = payoff.crossover(cpu, core, widths=widths)
    assert found["cpu_wins_at"] == (512, widths) and found["core_wins_from"] == (2048, widths)
    assert found["speedup_at_largest"] == pytest.approx(0.08 / core.step_s(8192, widths))
    assert "from batch 2048" in payoff.describe_crossover(found, "batch")
    never = payoff.crossover({(32, widths): 0.001}, core, widths=widths)
    assert never["core_wins_from"] is None
    assert "the CPU wins at every point" in payoff.describe_crossover(never, "batch")
    with pytest.raises(ValueError, match="no measured point"):
        payoff.crossover(cpu, core, batch=99)


def test_a_new_shape_on_the_device_is_one_new_graph():
    from mnist_mlp.xla_metrics import read_compile_metrics

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
    fig = payoff.plot_payoff(cpu, {(32, widths): 0.002}, payoff.model_from_tutorial(), "device", 512)
    assert len(fig.axes) == 2 and len(fig.legends) == 1
    assert len(fig.legends[0].get_texts()) <= 5
