import torch

from mnist_mlp.model import MLP


def test_mlp_shapes_and_log_probabilities():
    torch.manual_seed(0)
    model = MLP()
    out = model(torch.rand(5, 784))
    assert out.shape == (5, 10)
    # log_softmax: the exponentials of each row sum to one
    torch.testing.assert_close(out.exp().sum(dim=1), torch.ones(5))


def test_mlp_layers_as_in_the_tutorial():
    model = MLP()
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(784, 120), (120, 84), (84, 10)]
    assert sum(p.numel() for p in model.parameters()) == 784 * 120 + 120 + 120 * 84 + 84 + 84 * 10 + 10


def test_mlp_custom_sizes():
    model = MLP(input_size=20, output_size=3, layers=(7, 5))
    assert model(torch.rand(2, 20)).shape == (2, 3)


def test_mlp_learns_a_batch():
    torch.manual_seed(0)
    model = MLP()
    x, y = torch.rand(32, 784), torch.randint(0, 10, (32,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    first = None
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # batch 32: threads only contend (on a busy machine, many times slower)
    try:
        for _ in range(200):
            opt.zero_grad()
            loss = torch.nn.functional.nll_loss(model(x), y)
            loss.backward()
            opt.step()
            first = first if first is not None else loss.item()
    finally:
        torch.set_num_threads(threads)
    assert loss.item() < first / 2
