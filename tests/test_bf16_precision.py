"""mnist_mlp/common/precision.py: stochastic rounding, the SGD variants for BF16, and the settings, on the
CPU (their run on the stand-in XLA device is tests/test_bf16_precision_xla.py's: this file starts
no XLA runtime, so make mutants runs it for each mutant cheaply)."""
import pytest
import torch

from mnist_mlp.common.precision import (
    FP32MasterSGD,
    StochasticRoundingSGD,
    cast_inputs_to,
    deprecated_bf16_env_error,
    describe,
    parameter_bytes,
    stochastic_round_to_bf16,
    with_auto_cast_none,
)
from mnist_mlp.model import MLP

STEP_AT_1 = 2.0 ** -7  # BF16's spacing in [1, 2); 2**-8 in [0.5, 1)


def bf16_neighbours(x: torch.Tensor):
    """(toward zero, away from zero): the two BF16 values around FP32 x, from its bits."""
    kept = x.view(torch.int32) & -(1 << 16)
    return kept.view(torch.float32), (kept + (1 << 16)).view(torch.float32)


def test_sr_gives_one_of_the_two_neighbours_and_keeps_bf16_values():
    g = torch.Generator().manual_seed(0)
    powers = 2.0 ** torch.arange(-120, 120).float()
    x = torch.cat([torch.randn(5000, generator=g) * torch.logspace(-30, 30, 5000),
                   powers, -powers, powers * (1 - 2 ** -12), powers * (1 + 2 ** -12),
                   torch.randn(500, generator=g).to(torch.bfloat16).float()])
    low, high = bf16_neighbours(x)
    for _ in range(20):
        rounded = stochastic_round_to_bf16(x, torch.rand(x.shape, generator=g)).float()
        assert ((rounded == low) | (rounded == high)).all()
        exact = low == x
        assert torch.equal(rounded[exact], x[exact])


def test_sr_keeps_nan_and_infinities():
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0])
    out = stochastic_round_to_bf16(x, torch.full((4,), 0.0))
    assert out.dtype == torch.bfloat16 and torch.isnan(out[0])
    assert out[1] == float("inf") and out[2] == -float("inf") and out[3] == 0


@pytest.mark.parametrize("x", [1 + STEP_AT_1 / 8, -(1 + STEP_AT_1 / 8), 1 - 2.0 ** -11,
                               3 * 2.0 ** -20 + 2.0 ** -30])
def test_sr_is_right_on_average_where_round_to_nearest_is_not(x):
    n = 200_000
    values = torch.full((n,), x)
    draws = torch.rand(n, generator=torch.Generator().manual_seed(1))
    mean = stochastic_round_to_bf16(values, draws).double().mean().item()
    low, high = (v.item() for v in bf16_neighbours(torch.tensor([x])))
    step = abs(high - low)
    # binomial: the mean's standard deviation is at most step / (2 sqrt(n)); allow 5 of them
    assert abs(mean - x) < 5 * step / (2 * n ** 0.5)
    nearest = torch.tensor([x]).to(torch.bfloat16).double().item()
    assert abs(nearest - x) > 50 * step / (2 * n ** 0.5)  # round-to-nearest is off by far more


def test_sr_rejects_other_dtypes():
    with pytest.raises(TypeError, match="FP32"):
        stochastic_round_to_bf16(torch.ones(2, dtype=torch.bfloat16), torch.zeros(2))


def small_updates(optimizer_cls, steps=200, lr=1e-3, **options):
    """1,000 BF16 weights at 1.0, a gradient of 1 each step: each update (1e-3) is smaller
    than half a BF16 step below 1 (2**-9, about 2e-3). Returns the weights' mean after."""
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.ones(1000, dtype=torch.bfloat16))
    optimizer = optimizer_cls([weight], lr=lr, **options)
    for _ in range(steps):
        optimizer.zero_grad()
        weight.grad = torch.ones_like(weight)
        optimizer.step()
    assert weight.dtype == torch.bfloat16
    return weight.float().mean().item()


def test_round_to_nearest_loses_small_updates():
    assert small_updates(torch.optim.SGD) == 1.0  # 200 updates, not one of them kept


def test_stochastic_rounding_keeps_small_updates_on_average():
    assert small_updates(StochasticRoundingSGD) == pytest.approx(0.8, abs=0.005)


def test_master_weights_keep_small_updates():
    assert small_updates(FP32MasterSGD) == pytest.approx(0.8, abs=2.0 ** -9)


def test_master_weights_follow_fp32_sgd_exactly():
    """Fed the same (BF16) gradients, the FP32 copies move exactly as FP32 SGD would, with
    momentum too; the BF16 model holds them rounded to nearest."""
    torch.manual_seed(0)
    model = MLP().to(torch.bfloat16)
    reference = [p.detach().float().clone().requires_grad_() for p in model.parameters()]
    optimizer = FP32MasterSGD(model.parameters(), lr=0.05, momentum=0.9)
    plain = torch.optim.SGD(reference, lr=0.05, momentum=0.9)
    x, y = torch.randn(16, 784), torch.randint(0, 10, (16,))
    for _ in range(5):
        optimizer.zero_grad()
        plain.zero_grad()
        torch.nn.functional.nll_loss(model(x.to(torch.bfloat16)).float(), y).backward()
        for p, ref in zip(model.parameters(), reference):
            ref.grad = p.grad.float()
        optimizer.step()
        plain.step()
    for p, master, ref in zip(model.parameters(), optimizer.master_params, reference):
        assert master.dtype == torch.float32 and p.dtype == torch.bfloat16
        assert torch.equal(master, ref.detach())
        assert torch.equal(p, ref.detach().to(torch.bfloat16))


def test_master_zero_grad_clears_the_models_gradients():
    weight = torch.nn.Parameter(torch.ones(3, dtype=torch.bfloat16))
    optimizer = FP32MasterSGD([weight], lr=0.1)
    weight.grad = torch.ones_like(weight)
    optimizer.step()
    optimizer.zero_grad()
    assert weight.grad is None and all(m.grad is None for m in optimizer.master_params)
    with pytest.raises(ValueError, match="no parameters"):
        FP32MasterSGD([], lr=0.1)


def test_stochastic_rounding_sgd_wants_a_bf16_model_and_is_reproducible():
    with pytest.raises(TypeError, match=r"model.to\(torch.bfloat16\)"):
        StochasticRoundingSGD(MLP().parameters(), lr=0.01)
    assert small_updates(StochasticRoundingSGD, steps=20) == small_updates(StochasticRoundingSGD,
                                                                           steps=20)
    assert small_updates(StochasticRoundingSGD, steps=20, seed=1) != small_updates(
        StochasticRoundingSGD, steps=20, seed=0)


def test_parameter_bytes_counts_the_master_copy():
    n = sum(p.numel() for p in MLP().parameters())
    assert n == 784 * 120 + 120 + 120 * 84 + 84 + 84 * 10 + 10
    fp32 = MLP()
    assert parameter_bytes(fp32, torch.optim.SGD(fp32.parameters(), lr=0.1))["total"] == 4 * n
    bf16 = MLP().to(torch.bfloat16)
    assert parameter_bytes(bf16)["total"] == 2 * n
    master = parameter_bytes(bf16, FP32MasterSGD(bf16.parameters(), lr=0.1))
    assert master == {"model": 2 * n, "master_copy": 4 * n, "total": 6 * n}


def test_cast_inputs_lets_a_bf16_model_take_fp32_images():
    model = MLP().to(torch.bfloat16)
    keys = list(model.state_dict())
    with pytest.raises(RuntimeError):
        model(torch.randn(2, 784))
    out = cast_inputs_to(model, torch.bfloat16)(torch.randn(2, 784))
    assert out.dtype == torch.bfloat16 and out.shape == (2, 10)
    assert list(model.state_dict()) == keys


@pytest.mark.parametrize("flags, expected", [
    (None, "--auto-cast=none"),
    ("--cache_dir=/tmp/c --auto-cast=matmult -O1", "--cache_dir=/tmp/c -O1 --auto-cast=none"),
    ("--auto-cast all --model-type transformer", "--model-type transformer --auto-cast=none"),
    ("--cache_dir='/my dir'", "'--cache_dir=/my dir' --auto-cast=none"),
])
def test_auto_cast_none_replaces_only_the_auto_cast_flag(flags, expected):
    assert with_auto_cast_none(flags) == expected


def test_deprecated_bf16_variables_are_refused_with_what_to_do():
    assert deprecated_bf16_env_error({}) is None
    assert deprecated_bf16_env_error({"XLA_USE_BF16": "0", "XLA_DOWNCAST_BF16": ""}) is None
    message = deprecated_bf16_env_error({"XLA_DOWNCAST_BF16": "1"})
    assert "XLA_DOWNCAST_BF16" in message and "unset XLA_DOWNCAST_BF16" in message


def test_describe_says_when_stochastic_rounding_is_emulated():
    assert "EMULATED" in describe("bf16-sr", on_neuron=False)
    on_neuron = describe("bf16-sr", on_neuron=True)
    assert "EMULATED" not in on_neuron and "NEURON_RT_STOCHASTIC_ROUNDING_EN=1" in on_neuron
    assert "--auto-cast=none" in describe("autocast", on_neuron=True)
    with pytest.raises(ValueError, match="fp32, bf16"):
        describe("fp16", on_neuron=False)


SR_ON = "the NeuronCore rounds stochastically (NEURON_RT_STOCHASTIC_ROUNDING_EN=1)"
SR_EMULATED = ("stochastic rounding EMULATED in software in the SGD update: the CPU stand-in has "
               "no such hardware (a NeuronCore does it when NEURON_RT_STOCHASTIC_ROUNDING_EN=1)")
NEAREST = "round to nearest (NEURON_RT_STOCHASTIC_ROUNDING_EN=0)"


@pytest.mark.parametrize("precision, on_neuron, line", [
    ("fp32", True, f"FP32 weights and activations, as train.py | {NEAREST}"),
    ("bf16", False, f"BF16 weights, gradients and activations, loss in FP32 | {NEAREST}"),
    ("bf16-sr", True, f"BF16 weights, gradients and activations, loss in FP32 | {SR_ON}"),
    ("bf16-sr", False, f"BF16 weights, gradients and activations, loss in FP32 | {SR_EMULATED}"),
    ("bf16-master", False, f"BF16 model, FP32 master weights in the optimizer, loss in FP32 | "
                           f"{NEAREST}"),
    ("autocast", True, "FP32 weights, forward pass under torch.autocast(bfloat16); NEURON_CC_FLAGS "
                       f"gets --auto-cast=none | {NEAREST}"),
])
def test_each_precision_line_word_for_word(precision, on_neuron, line):
    """The line train_bf16.py prints after the backend's: what the mode does, how it rounds."""
    assert describe(precision, on_neuron=on_neuron) == f"Precision: {precision} | {line}"


def test_the_deprecated_variables_message_word_for_word():
    assert deprecated_bf16_env_error({"XLA_USE_BF16": "1", "XLA_DOWNCAST_BF16": "1"}) == (
        "XLA_USE_BF16 and XLA_DOWNCAST_BF16 is set: deprecated since torch-xla 2.5, and it would "
        "override --precision. Unset it (e.g. `unset XLA_USE_BF16 XLA_DOWNCAST_BF16`) and pick a "
        "--precision mode.")


def test_the_far_neighbour_is_taken_when_the_draw_is_below_the_chance():
    """x halfway between two BF16 values: chance 1/2. A draw of exactly 1/2 keeps the nearest
    (draws are uniform in [0, 1): P(draw < 1/2) is 1/2, P(draw <= 1/2) one float more)."""
    x = torch.tensor([1 + STEP_AT_1 / 2])  # nearest (ties to even): 1.0; far: 1 + STEP_AT_1
    below_half = torch.nextafter(torch.tensor([0.5]), torch.tensor([0.0]))
    assert stochastic_round_to_bf16(x, torch.tensor([0.5])).item() == 1.0
    assert stochastic_round_to_bf16(x, below_half).item() == 1 + STEP_AT_1


def test_the_sgd_variants_take_their_learning_rate_seed_and_device():
    """The lr given (not SGD's default), seed 0 unless told, the draws made on the parameters'
    device (the meta device here: no data, only where tensors live)."""
    weight = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    optimizer = StochasticRoundingSGD([weight], lr=0.5)
    weight.grad = torch.ones_like(weight)
    optimizer.step()
    assert weight.tolist() == [0.5] * 4  # exact in BF16: no rounding either way
    assert small_updates(StochasticRoundingSGD, steps=20) == small_updates(
        StochasticRoundingSGD, steps=20, seed=0)
    on_meta = torch.nn.Parameter(torch.empty(3, dtype=torch.bfloat16, device="meta"))
    assert StochasticRoundingSGD([on_meta], lr=0.1).state[on_meta]["draw_offsets"].is_meta
    with pytest.raises(TypeError) as err:
        StochasticRoundingSGD([torch.nn.Parameter(torch.ones(2, dtype=torch.float16))], lr=0.1)
    assert str(err.value) == ("StochasticRoundingSGD updates BF16 parameters, got torch.float16: "
                              "cast the model first (model.to(torch.bfloat16))")
    with pytest.raises(ValueError) as err:
        FP32MasterSGD([], lr=0.1)
    assert str(err.value) == "FP32MasterSGD got no parameters"


def test_cast_inputs_keeps_the_other_arguments():
    class Scaled(torch.nn.Module):
        def forward(self, x, scale, shift=0.0):
            return x * scale + shift

    out = cast_inputs_to(Scaled(), torch.bfloat16)(torch.ones(2), 3.0, 1.0)
    assert out.dtype == torch.bfloat16 and out.tolist() == [4.0, 4.0]
