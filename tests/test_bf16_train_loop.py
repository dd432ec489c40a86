"""mnist_mlp/train_bf16.py's train() loop in this process, on the CPU (no XLA runtime starts): each
batch is one step of the same arithmetic as a plain PyTorch loop, the forward pass alone under
BF16 autocast when asked, one torch_xla.sync() per step unless the device loader syncs. On the
stand-in device: tests/test_bf16_train_loop_xla.py; as a script: tests/test_bf16_script.py; what
main() sets on Neuron: tests/test_bf16_on_neuron.py."""
import pytest
import torch

from mnist_mlp import train_bf16
from mnist_mlp.common.tracking import StepTracker
from mnist_mlp.model import MLP

CPU = torch.device("cpu")


def batches(n=3, size=8):
    g = torch.Generator().manual_seed(0)
    return [(torch.rand(size, 1, 28, 28, generator=g), torch.randint(0, 10, (size,), generator=g))
            for _ in range(n)]


def reference_training(loader, epochs, autocast):
    """The same steps written out: NLL loss in FP32, forward (only) under autocast, plain SGD."""
    torch.manual_seed(0)
    model = MLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                output = model(x.reshape(len(x), -1))
            loss = torch.nn.functional.nll_loss(output.float(), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return model, losses


@pytest.fixture
def syncs(monkeypatch):
    """The torch_xla.sync() calls train() makes (none reach a runtime: this test has no device)."""
    calls = []
    monkeypatch.setattr(train_bf16.torch_xla, "sync", lambda: calls.append("sync"))
    return calls


@pytest.mark.parametrize("autocast", [False, True])
def test_each_batch_is_one_step_of_plain_sgd(autocast, syncs):
    loader = batches()
    expected_model, expected_losses = reference_training(loader, epochs=2, autocast=autocast)
    torch.manual_seed(0)
    model = MLP().eval()  # train() puts it in training mode itself
    tracker = StepTracker(xla=False, progress=False, loss_every=1, warmup=1)
    asked = {"autocast": True} if autocast else {}  # without it: no autocast
    train_bf16.train(model, torch.optim.SGD(model.parameters(), lr=0.1), loader, CPU, 2, tracker,
                     **asked)
    assert model.training
    assert tracker.steps == 6 and syncs == ["sync"] * 6  # one sync per step, after it
    assert [loss for _, loss in tracker.loss_history] == expected_losses
    for p, q in zip(model.parameters(), expected_model.parameters()):
        assert torch.equal(p, q)
    assert tracker.throughput > 0  # stop() ended the timed span


def test_autocast_runs_the_forward_pass_in_bf16_and_the_loss_in_fp32(syncs):
    """Under autocast the linear layers compute in BF16: the losses differ from FP32's."""
    loader = batches(n=2)
    _, fp32_losses = reference_training(loader, epochs=1, autocast=False)
    torch.manual_seed(0)
    model = MLP()
    tracker = StepTracker(xla=False, progress=False, loss_every=1)
    train_bf16.train(model, torch.optim.SGD(model.parameters(), lr=0.1), loader, CPU, 1, tracker,
                     autocast=True)
    autocast_losses = [loss for _, loss in tracker.loss_history]
    assert autocast_losses != fp32_losses
    assert autocast_losses == pytest.approx(fp32_losses, rel=0.05)
    assert tracker._last_loss.dtype == torch.float32


def test_with_the_device_loader_the_loop_itself_does_not_sync(syncs):
    """The device loader (MpDeviceLoader) syncs after each batch: the loop adds none, and steps
    stop at the tracker's limit."""
    torch.manual_seed(0)
    model = MLP()
    tracker = StepTracker(max_steps=4, xla=False, progress=False)
    train_bf16.train(model, torch.optim.SGD(model.parameters(), lr=0.1), batches(), CPU, 3,
                     tracker, sync_each_step=False)
    assert tracker.steps == 4 and syncs == []
