"""train_bf16.train() on the stand-in XLA device, in this process (the runtime starts at
collection: tests/xla_stand_in.py says why; the CPU checks of the loop are
tests/test_bf16_train_loop.py's): the batches go to the device the model is on, and the steps
compute what the CPU reference computes."""
import pytest
import torch

from mnist_mlp import train_bf16
from mnist_mlp.common.tracking import StepTracker
from mnist_mlp.model import MLP
from tests.test_bf16_train_loop import batches, reference_training
from tests.xla_stand_in import stand_in_device

DEVICE = stand_in_device()  # at collection: tests/xla_stand_in.py says why


def test_the_loop_trains_on_the_xla_device():
    loader = batches(n=2, size=23)  # a batch size no other test of this process uses
    expected_model, expected_losses = reference_training(loader, epochs=1, autocast=False)
    torch.manual_seed(0)
    model = MLP().to(DEVICE)
    tracker = StepTracker(xla=True, progress=False, loss_every=1)
    train_bf16.train(model, torch.optim.SGD(model.parameters(), lr=0.1), loader, DEVICE, 1,
                     tracker)
    assert [loss for _, loss in tracker.loss_history] == pytest.approx(expected_losses, rel=1e-5)
    for p, q in zip(model.parameters(), expected_model.parameters()):
        assert p.device.type == "xla"
        torch.testing.assert_close(p.cpu(), q, rtol=1e-5, atol=1e-6)
