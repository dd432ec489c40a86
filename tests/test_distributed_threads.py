"""The data-parallel pieces in this process: two ranks of one real gloo group (loopback), one
thread each, so that every call runs here where a test sees it (tests/test_distributed.py runs
the same over two processes); and data_parallel_setup() on a one-worker job."""
import datetime
import sys
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


def test_a_drift_message_gives_each_ranks_parameter_sum():
    models = {0: one_model(), 1: one_model()}
    with torch.no_grad():
        models[1].fc2.bias[0] += 0.25
    sums = [float(parameter_checksum(models[r])[0]) for r in (0, 1)]
    spread = float((parameter_checksum(models[1]) - parameter_checksum(models[0])).abs().max())
    results = on_two_ranks(lambda rank, group: check_replicas_equal(models[rank], group))
    assert str(results[0]) == str(results[1]) == (
        f"Replicas differ after training (max checksum difference {spread:.3g} > 1e-06; "
        f"parameter sums rank 0: {sums[0]:.9f}, rank 1: {sums[1]:.9f}). The gradients were not "
        "all-reduced across workers.")


RANK = threading.local()  # which rank the running thread is, for per_rank_stdout


def per_rank_stdout(monkeypatch) -> dict:
    """{rank: what it printed}: sys.stdout for the threads of on_two_ranks, each writing under
    the rank it set in RANK (torchrun keeps each worker's output apart the same way)."""
    out = {}

    class PerRank:
        def write(self, text):
            rank = getattr(RANK, "value", None)
            out[rank] = out.get(rank, "") + text

        def flush(self):
            pass

    monkeypatch.setattr(sys, "stdout", PerRank())
    return out


def ticking_clock():
    """A clock that advances one second per reading: throughput is a known number."""
    ticks = iter(range(1000))
    return lambda: float(next(ticks))


@pytest.mark.parametrize("reduce_over_gloo", [True, False])
def test_finish_checks_the_replicas_and_gathers_every_ranks_figures(reduce_over_gloo, monkeypatch):
    """What rank 0 writes into the results record: every rank's throughput, shard size and
    losses, in rank order; only rank 0 says the replicas are equal."""
    from mnist_mlp.common.distributed import DataParallel
    from mnist_mlp.common.tracking import StepTracker

    models = {0: one_model(), 1: one_model()}

    def work(rank, group):
        RANK.value = rank
        tracker = StepTracker(xla=False, progress=False, warmup=1, loss_every=1,
                              clock=ticking_clock())
        for step in range(3):
            tracker.step(torch.tensor(float(10 * rank + step)))
        tracker.stop()
        job = DataParallel(rank, 2, group, reduce_over_gloo, samples_per_epoch=100 + rank)
        job.barrier()
        return job.finish(models[rank], tracker)

    out = per_rank_stdout(monkeypatch)
    results = on_two_ranks(work)
    assert results[0] == results[1] == {
        "gradient_reduce": "gloo" if reduce_over_gloo else "xla",
        "throughput_by_rank": [2 / 3, 2 / 3],  # 2 steps after the warm-up one, timed over 3 ticks
        "samples_per_epoch_by_rank": [100, 101],
        "loss_history_by_rank": {"0": [[1, 0.0], [2, 1.0], [3, 2.0]],
                                 "1": [[1, 10.0], [2, 11.0], [3, 12.0]]}}
    assert out == {0: "Replicas equal: max parameter-checksum difference 0 across 2 worker(s) "
                      "(tolerance 1e-06). Each rank's final loss above is its own last batch's, "
                      "so they differ.\n"}


def test_each_rank_loads_its_own_shard_of_whole_batches(mnist_root, monkeypatch):
    """Two workers, batches of 32: each gets 30,000 images' worth of whole batches (937, the
    same step count on both), its own images, and the whole test set; rank 0 alone checks the
    files' md5s (once, saying nothing), the other waits for it."""
    import argparse

    from mnist_mlp.common import data, download
    from mnist_mlp.common.distributed import DataParallel

    args = argparse.Namespace(data_dir=str(mnist_root), loader="fast", batch_size=32, seed=0)
    verified = []  # (rank, root, progress) of each md5 check, passed on to the real one
    real_ensure_mnist = download.ensure_mnist

    def ensure_mnist(root=None, **options):
        verified.append((RANK.value, root, options.get("progress", True)))
        return real_ensure_mnist(root, **options)

    monkeypatch.setattr(download, "ensure_mnist", ensure_mnist)
    monkeypatch.setattr(data, "ensure_mnist", ensure_mnist)
    out = per_rank_stdout(monkeypatch)

    def work(rank, group):
        RANK.value = rank
        job = DataParallel(rank, 2, group, reduce_over_gloo=True)
        train, test = job.mnist_loaders(args)
        first_images, _ = next(iter(train))
        return len(train), job.samples_per_epoch, first_images, sum(len(y) for _, y in test)

    results = on_two_ranks(work)
    for rank in (0, 1):
        assert results[rank][0] == 937 and results[rank][1] == 937 * 32
        assert results[rank][3] == 10_000
    assert not torch.equal(results[0][2], results[1][2])  # two shards, not one set twice
    assert verified == [(0, str(mnist_root), False)] and out == {}  # rank 0 alone, quietly


def test_on_neuron_a_worker_count_the_instance_lacks_stops_the_job_first(one_worker_job,
                                                                        tmp_path, monkeypatch):
    """On a trn1.2xlarge (its files under WORKBOOK_PLATFORM_ROOT) four workers are refused
    before any group is made; two pass; LOCAL_WORLD_SIZE unset means one."""
    from mnist_mlp.common.backend import Backend
    from mnist_mlp.common.platform_paths import PLATFORM_ROOT_ENV
    from tests.neuron_trees import TRN1_2XLARGE, neuron_host

    monkeypatch.setenv(PLATFORM_ROOT_ENV, str(neuron_host(tmp_path, *TRN1_2XLARGE)))
    neuron = Backend("neuron", "test", "2.9.0", "2.9.0", "2.9.0", 2)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    with pytest.raises(ValueError, match=r"^trn1.2xlarge supports 1, 2 worker\(s\) per node, "
                                         r"not 4"):
        data_parallel_setup(neuron)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert data_parallel_setup(neuron).world_size == 1
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert data_parallel_setup(neuron).rank == 0
    stand_in = Backend("xla-cpu", "test", "2.9.0", "2.9.0", None, 0)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")  # not judged off Neuron: the runtime has no cores
    assert data_parallel_setup(stand_in).world_size == 1


@pytest.fixture
def one_worker_xla_like_job(monkeypatch):
    """A one-worker world whose backend is not gloo, as train_torchrun.py's xla world on Neuron:
    torch's own test backend "fake" (torch.testing), destroyed afterwards."""
    import torch.testing._internal.distributed.fake_pg  # noqa: F401  registers "fake"

    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    dist.init_process_group("fake", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_the_control_group_is_gloo_with_a_bounded_wait(one_worker_xla_like_job):
    """The group train_torchrun.py uses for control work (and the stand-in's all-reduce): gloo,
    whatever the world's backend, and a wait on a dead worker ends after 5 minutes by default."""
    from mnist_mlp.common.backend import Backend

    assert dist.get_backend() == "fake"

    stand_in = Backend("xla-cpu", "test", "2.9.0", "2.9.0", None, 0)
    for job, minutes in ((data_parallel_setup(stand_in), 5),
                         (data_parallel_setup(stand_in, timeout_minutes=0.5), 0.5)):
        assert dist.get_backend(job.group) == "gloo"
        gloo = job.group._get_backend(torch.device("cpu"))
        assert gloo.options._timeout == datetime.timedelta(minutes=minutes)
