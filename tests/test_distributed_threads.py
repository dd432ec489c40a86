"""The data-parallel pieces in this process: two ranks of one real gloo group (loopback), one
thread each, so that every call runs here where a test sees it (tests/test_distributed.py runs
the same over two processes); and data_parallel_setup() on a one-worker job."""
import datetime
import threading
import warnings

import pytest
import torch
import torch.distributed as dist

from mnist_mlp.common.distributed import (
    REPLICA_TOLERANCE,
    average_gradients,
    check_replicas_equal,
    data_parallel_setup,
    gather_objects,
    parameter_checksum,
)
from mnist_mlp.model import MLP


def on_two_ranks(work):
    """work(rank, group) on rank 0 and rank 1 of a two-rank gloo group, one thread each;
    returns {rank: what it returned or raised}."""
    store = dist.HashStore()
    results = {}

    def run(rank):
        options = dist.ProcessGroupGloo._Options()
        options._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
        options._timeout = datetime.timedelta(seconds=60)
        with warnings.catch_warnings():  # a gloo group used directly, not through the world
            warnings.simplefilter("ignore", UserWarning)
            group = dist.ProcessGroupGloo(store, rank, 2, options)
            try:
                results[rank] = work(rank, group)
            except Exception as err:  # noqa: BLE001  returned to the test, which names it
                results[rank] = err

    threads = [threading.Thread(target=run, args=(rank,)) for rank in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)  # a hang guard, not a timing
    assert not any(t.is_alive() for t in threads), "a collective hung"
    return results


def test_gradients_are_averaged_over_the_ranks_in_place():
    """Each gradient becomes the mean over the ranks, in the tensor it was; a parameter without
    a gradient (on every rank) is left without one."""
    def work(rank, group):
        model = MLP()
        for i, p in enumerate(model.parameters()):
            p.grad = torch.full_like(p, float((rank + 1) * (i + 1)))  # rank 1: twice rank 0's
        model.fc1.bias.grad = None
        grads = {name: p.grad for name, p in model.named_parameters()}
        average_gradients(model.parameters(), group)
        assert all(p.grad is grads[name] for name, p in model.named_parameters())
        return {name: None if p.grad is None else p.grad.unique().tolist()
                for name, p in model.named_parameters()}

    results = on_two_ranks(work)
    names = [name for name, _ in MLP().named_parameters()]
    expected = {name: [1.5 * (i + 1)] for i, name in enumerate(names)}
    expected["fc1.bias"] = None
    assert results[0] == results[1] == expected


def one_model():
    torch.manual_seed(0)
    return MLP()


def test_replicas_equal_pass_and_drifted_ones_fail_on_every_rank():
    models = {0: one_model(), 1: one_model()}

    def work(rank, group):
        equal = check_replicas_equal(models[rank], group)
        if rank == 1:
            with torch.no_grad():
                models[rank].fc1.weight[0, 0] += 1e-3
        try:
            check_replicas_equal(models[rank], group)
        except RuntimeError as err:
            return equal, str(err)
        return equal, None

    results = on_two_ranks(work)
    for rank in (0, 1):
        equal, error = results[rank]
        assert equal == 0.0
        assert error.startswith("Replicas differ after training (max checksum difference ")
        assert f"> {REPLICA_TOLERANCE:g}" in error and "rank 0: " in error and "rank 1: " in error
        assert error.endswith("The gradients were not all-reduced across workers.")


def test_a_drift_within_the_tolerance_passes_and_is_returned():
    models = {0: one_model(), 1: one_model()}
    with torch.no_grad():
        models[1].fc1.weight[0, 0] += 0.5

    results = on_two_ranks(lambda rank, group: check_replicas_equal(models[rank], group,
                                                                    tolerance=1.0))
    assert results[0] == results[1] and 0 < results[0] <= 1.0
    assert on_two_ranks(lambda rank, group: check_replicas_equal(
        models[rank], group, tolerance=results[0]))[0] == results[0]  # the tolerance is inclusive


def test_objects_are_gathered_in_rank_order():
    results = on_two_ranks(lambda rank, group: gather_objects({"rank": rank}, group))
    assert results[0] == results[1] == [{"rank": 0}, {"rank": 1}]


def test_the_checksum_is_the_sum_and_the_sum_of_squares():
    model = torch.nn.Linear(2, 1)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, 2.0]]))
        model.bias.fill_(-3.0)
    checksum = parameter_checksum(model)
    assert checksum.dtype == torch.float64 and checksum.tolist() == [0.0, 14.0]


@pytest.fixture
def one_worker_job(monkeypatch):
    """A default process group of one worker in this process (torchrun --nproc_per_node=1),
    destroyed afterwards."""
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_one_xla_worker_reduces_through_xla_and_says_so(one_worker_job, capsys):
    from mnist_mlp.common.backend import Backend

    stand_in = Backend("xla-cpu", "test", "2.9.0", "2.9.0", None, 0)
    job = data_parallel_setup(stand_in)
    assert (job.rank, job.world_size, job.reduce_over_gloo) == (0, 1, False)
    assert capsys.readouterr().out == "Gradient all-reduce: xm.optimizer_step over 1 XLA worker(s).\n"
