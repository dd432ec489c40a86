"""BF16 training, the pieces train_bf16.py uses: the --precision modes, stochastic rounding
emulated in software (the CPU stand-in has no hardware for it), SGD on FP32 master weights,
and the environment the Neuron runtime and compiler read for each mode."""
from __future__ import annotations

import os

import torch

from mnist_mlp.common.neuron_cc_flags import ENV_VAR, set_flag

PRECISIONS = ("fp32", "bf16", "bf16-sr", "bf16-master", "autocast")
BF16_MODEL = ("bf16", "bf16-sr", "bf16-master")  # the modes whose model is cast to BF16

STOCHASTIC_ROUNDING_ENV = "NEURON_RT_STOCHASTIC_ROUNDING_EN"
DEPRECATED_BF16_ENV = ("XLA_USE_BF16", "XLA_DOWNCAST_BF16")

# BF16 keeps 8 significant bits, so the BF16 values next to a BF16 value r lie 1/256 to 1/128
# of |r| away. A nudge of 5/1024 (1.25/256) of |r| rounds to the neighbour on its side, and is
# exact in FP32 (few bits). Found this way, it needs no bit casts, which XLA would run on the host.
_NUDGE = 5 / 1024


def stochastic_round_to_bf16(x: torch.Tensor, draw: torch.Tensor) -> torch.Tensor:
    """Round FP32 `x` to one of its two BF16 neighbours at random, the far one with probability
    equal to how far `x` lies towards it: the result is right on average (round-to-nearest is
    not: it always drops a change smaller than half a BF16 step).

    draw: uniform random numbers in [0, 1) of x's shape (torch.rand, or as StochasticRoundingSGD
    makes them).
    NaN and infinities stay as they are; values below BF16's smallest normal (about 1e-38)
    round to nearest.
    """
    if x.dtype != torch.float32:
        raise TypeError(f"stochastic_round_to_bf16 takes an FP32 tensor, got {x.dtype}")
    nearest = x.to(torch.bfloat16).float()  # round to nearest, exact in FP32
    residual = x - nearest  # exact: at most half a BF16 step
    away = nearest + torch.sign(residual) * nearest.abs() * _NUDGE
    neighbour = away.to(torch.bfloat16).float()  # the other BF16 value next to x
    chance = residual.abs() / (neighbour - nearest).abs()  # NaN (never taken) when x is exact
    return torch.where(draw < chance, neighbour, nearest).to(torch.bfloat16)


class StochasticRoundingSGD(torch.optim.SGD):
    """Plain SGD on BF16 parameters, each update computed in FP32 and stochastically rounded
    back to BF16: a software emulation of what a NeuronCore does in hardware when
    NEURON_RT_STOCHASTIC_ROUNDING_EN=1. Only for the CPU stand-in; on Neuron use torch.optim.SGD
    and let the hardware round.

    The random draws: a fixed random offset per element (made once from `seed`), all shifted
    by one fresh random number per tensor and step, modulo 1. Each element's draw is uniform
    and independent from step to step, which is what makes the rounding right on average,
    for one call to the RNG per tensor instead of one per element (XLA's RNG on the CPU costs
    more than the whole training step).
    """

    def __init__(self, params, lr: float, seed: int = 0):
        super().__init__(params, lr=lr)
        params = [p for g in self.param_groups for p in g["params"]]
        not_bf16 = sorted({str(p.dtype) for p in params if p.dtype != torch.bfloat16})
        if not_bf16:
            raise TypeError(f"StochasticRoundingSGD updates BF16 parameters, got {not_bf16[0]}: "
                            f"cast the model first (model.to(torch.bfloat16))")
        generator = torch.Generator().manual_seed(seed)  # on the host, then uploaded once
        for p in params:
            self.state[p]["draw_offsets"] = torch.rand(p.shape, generator=generator).to(p.device)

    @torch.no_grad()
    def step(self, closure=None):
        if closure is not None:
            raise ValueError("StochasticRoundingSGD.step takes no closure")
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                updated = p.float() - group["lr"] * p.grad.float()
                draw = self.state[p]["draw_offsets"] + torch.rand((), device=p.device)
                draw = torch.where(draw >= 1, draw - 1, draw)  # modulo 1: uniform in [0, 1)
                p.copy_(stochastic_round_to_bf16(updated, draw))
        return None


class FP32MasterSGD(torch.optim.SGD):
    """SGD on FP32 master copies of a BF16 model's parameters (the Neuron docs'
    "GPU-compatible mode"): each step converts the BF16 gradients to FP32, updates the FP32
    copies, and writes them back, rounded to nearest, into the BF16 model. Small updates
    accumulate in the FP32 copy until they show in BF16, instead of being lost.

    `sgd_options` (momentum, weight_decay, ...) go to torch.optim.SGD, which keeps its
    state in FP32 too.
    """

    def __init__(self, params, lr: float, **sgd_options):
        self.model_params = list(params)
        if not self.model_params:
            raise ValueError("FP32MasterSGD got no parameters")
        # Built on the host and uploaded: made on an XLA device, the copies would be pending
        # work merged into the first step's graph, which would then differ from the rest.
        masters = [p.detach().cpu().float().to(p.device) for p in self.model_params]
        super().__init__(masters, lr=lr, **sgd_options)

    @property
    def master_params(self) -> list[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    @torch.no_grad()
    def step(self, closure=None):
        if closure is not None:
            raise ValueError("FP32MasterSGD.step takes no closure")
        for p, master in zip(self.model_params, self.master_params):
            master.grad = None if p.grad is None else p.grad.float()
        super().step()
        for p, master in zip(self.model_params, self.master_params):
            p.copy_(master)  # FP32 -> the model's dtype, round to nearest
        return None

    def zero_grad(self, set_to_none: bool = True) -> None:
        super().zero_grad(set_to_none)
        for p in self.model_params:
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.zero_()


def parameter_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None
                    ) -> dict[str, int]:
    """Bytes of weights held: the model's, and the optimizer's FP32 master copies if any."""
    model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    master_bytes = 0
    if isinstance(optimizer, FP32MasterSGD):
        master_bytes = sum(p.numel() * p.element_size() for p in optimizer.master_params)
    return {"model": model_bytes, "master_copy": master_bytes, "total": model_bytes + master_bytes}


def with_auto_cast_none(flags: str | None) -> str:
    """NEURON_CC_FLAGS with `--auto-cast=none` in place of any --auto-cast given, every other
    flag (cache dir, model type, ...) kept as it was."""
    return set_flag(flags, "--auto-cast", "none")


def set_auto_cast_none(env=None) -> None:
    """--auto-cast=none into the environment's NEURON_CC_FLAGS (os.environ by default), every
    other flag kept: the compiler then casts nothing on top of torch.autocast."""
    env = os.environ if env is None else env
    env[ENV_VAR] = with_auto_cast_none(env.get(ENV_VAR))


def deprecated_bf16_env_error(env=None) -> str | None:
    """A message if XLA_USE_BF16 / XLA_DOWNCAST_BF16 is set (they override every --precision
    mode and are deprecated since torch-xla 2.5), else None."""
    env = os.environ if env is None else env
    found = [name for name in DEPRECATED_BF16_ENV if env.get(name, "") not in ("", "0")]
    if not found:
        return None
    return (f"{' and '.join(found)} is set: deprecated since torch-xla 2.5, and it would override "
            f"--precision. Unset it (e.g. `unset {' '.join(found)}`) and pick a --precision mode.")


def cast_inputs_to(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """Make `model` cast its input to `dtype` (a BF16 model fed FP32 images), in training and
    evaluation alike; the state_dict is unchanged."""
    model.register_forward_pre_hook(lambda module, args: (args[0].to(dtype), *args[1:]))
    return model


def describe(precision: str, on_neuron: bool) -> str:
    """One line saying what `precision` does here, and what is emulated on the stand-in."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}: choose one of {', '.join(PRECISIONS)}")
    if precision == "bf16-sr":
        rounding = (f"the NeuronCore rounds stochastically ({STOCHASTIC_ROUNDING_ENV}=1)"
                    if on_neuron else
                    f"stochastic rounding EMULATED in software in the SGD update: the CPU "
                    f"stand-in has no such hardware (a NeuronCore does it when "
                    f"{STOCHASTIC_ROUNDING_ENV}=1)")
    else:
        rounding = f"round to nearest ({STOCHASTIC_ROUNDING_ENV}=0)"
    what = {
        "fp32": "FP32 weights and activations, as train.py",
        "bf16": "BF16 weights, gradients and activations, loss in FP32",
        "bf16-sr": "BF16 weights, gradients and activations, loss in FP32",
        "bf16-master": "BF16 model, FP32 master weights in the optimizer, loss in FP32",
        "autocast": (f"FP32 weights, forward pass under torch.autocast(bfloat16); "
                     f"{ENV_VAR} gets --auto-cast=none"),
    }[precision]
    return f"Precision: {precision} | {what} | {rounding}"
