"""mnist_mlp/common/precision.py's stochastic-rounding SGD on the stand-in XLA device, in this process (the
runtime starts at collection: tests/xla_stand_in.py says why)."""
import torch

from mnist_mlp.common.precision import StochasticRoundingSGD
from mnist_mlp.model import MLP
from tests.xla_stand_in import stand_in_device

DEVICE = stand_in_device()  # at collection: tests/xla_stand_in.py says why


def test_on_xla_the_rounding_runs_in_the_step_graph():
    """No host fallback (a bit cast would be one) and the same graph for every step."""
    import torch_xla
    import torch_xla.debug.metrics as met

    def fallbacks():  # torch_xla counts each op it ran on the host as aten::<op>
        return {name: met.counter_value(name) for name in met.counter_names()
                if name.startswith("aten::")}

    torch.manual_seed(0)
    model = MLP().to(torch.bfloat16).to(DEVICE)
    optimizer = StochasticRoundingSGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 784).to(DEVICE, torch.bfloat16)
    y = torch.randint(0, 10, (32,)).to(DEVICE)
    torch_xla.sync()
    before = fallbacks()
    compiled = []
    for _ in range(4):
        optimizer.zero_grad()
        torch.nn.functional.nll_loss(model(x).float(), y).backward()
        optimizer.step()
        torch_xla.sync()
        compiled.append(met.counter_value("UncachedCompile") or 0)
    assert compiled[1:] == [compiled[0]] * 3, compiled
    new_fallbacks = {name: n for name, n in fallbacks().items() if n != before.get(name)}
    assert new_fallbacks == {}, new_fallbacks
    assert model.fc1.weight.dtype == torch.bfloat16 and model.fc1.weight.device.type == "xla"
