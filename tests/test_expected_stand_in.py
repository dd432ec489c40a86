"""The stand-in's values in helpers/checks/expected.py are what torch_xla measures, in this process
(the XLA runtime starts at collection, tests/xla_stand_in.py says why; kept apart from
tests/test_expected.py, whose unit tests make mutants runs for each mutant without the runtime)."""
from helpers.checks.expected import expected
from tests.xla_stand_in import stand_in_device

DEVICE = stand_in_device()  # at collection: tests/xla_stand_in.py says why


def test_stand_in_values_are_what_torch_xla_measures():
    """On the stand-in: graphs per training loop, a new learning rate, and PyTorch 1.x's
    zero_grad (zeroed, not None), which gives the two graphs of the AWS tutorial's log."""
    import torch
    import torch_xla
    import torch_xla.debug.metrics as met

    from mnist_mlp.model import MLP

    compiles = lambda: int(met.counter_value("UncachedCompile") or 0)  # noqa: E731
    batch = 27  # a batch size no other test of this process trains with: graphs of its own
    x = torch.randn(batch, 784).to(DEVICE)
    y = torch.randint(0, 10, (batch,)).to(DEVICE)
    measured = {}
    for case, set_to_none, lrs in (("loop", True, (0.01,) * 3), ("lr", True, (0.05,) * 2),
                                   ("zeroed", False, (0.01,) * 3)):
        torch.manual_seed(0)
        model = MLP().to(DEVICE)
        optimizer = torch.optim.SGD(model.parameters(), lr=lrs[0])
        before = compiles()
        for lr in lrs:
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.zero_grad(set_to_none=set_to_none)
            torch.nn.functional.nll_loss(model(x), y).backward()
            optimizer.step()
            torch_xla.sync()
        measured[case] = compiles() - before
    stand_in = expected("xla-cpu")
    assert measured["loop"] in stand_in.train_graphs, measured  # one graph for every step
    assert (measured["lr"] > 0) == stand_in.lr_change_recompiles, measured  # 0.05: device data
    # set_to_none=False: step 1 traces the graph "loop" already compiled, later steps a second.
    assert measured["zeroed"] == 1, measured
    assert 2 in expected("neuron").train_graphs
