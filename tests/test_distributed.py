"""The data-parallel pieces over a real two-process gloo group."""
import json
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from helpers.launch.processes import free_port
from mnist_mlp.common.distributed import average_gradients, check_replicas_equal, gather_objects
from mnist_mlp.model import MLP
from tests.built_once import built_once

pytestmark = pytest.mark.e2e  # two real processes

SCENARIOS = ("average", "equal", "drift", "gather")


def worker(rank, world_size, port, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    group = dist.new_group(backend="gloo")
    for scenario in SCENARIOS:
        results[(scenario, rank)] = run_scenario(scenario, rank, group)
    dist.destroy_process_group()


def run_scenario(scenario, rank, group):
    torch.manual_seed(0)
    model = MLP()
    if scenario == "average":
        for p in model.parameters():
            p.grad = torch.full_like(p, float(rank + 1))  # rank 0: ones, rank 1: twos
        average_gradients(model.parameters(), group)
        return [float(p.grad.unique().item()) for p in model.parameters()]
    if scenario == "equal":
        return check_replicas_equal(model, group)
    if scenario == "drift":
        if rank == 1:
            with torch.no_grad():
                model.fc1.weight[0, 0] += 1e-3  # what un-reduced gradients do, in small
        try:
            check_replicas_equal(model, group)
            return "passed"
        except RuntimeError as err:
            return str(err)
    if scenario == "gather":
        return gather_objects({"rank": rank}, group)
    raise ValueError(scenario)


def run_two_ranks(directory):
    """Every scenario on both ranks of one real two-process gloo group, into results.json.

    The two ranks (and the results' manager) are forked from a fork server that imported this
    module, and so torch, once: not a fresh interpreter importing torch for each rank."""
    context = mp.get_context("forkserver")
    context.set_forkserver_preload([__name__])  # when this session starts the fork server
    with context.Manager() as manager:
        results = manager.dict()
        mp.start_processes(worker, args=(2, free_port(), results), nprocs=2, join=True,
                           start_method="forkserver")
        results = dict(results)
    (directory / "results.json").write_text(
        json.dumps([[scenario, rank, result] for (scenario, rank), result in results.items()]))


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """Every scenario, run once on each rank of one real two-process gloo group (once for both
    xdist workers)."""
    directory = built_once(tmp_path_factory, "gloo-two-ranks", run_two_ranks)
    results = {(scenario, rank): result for scenario, rank, result
               in json.loads((directory / "results.json").read_text())}
    return lambda scenario: {rank: results[(scenario, rank)] for rank in (0, 1)}


def test_average_gradients_over_gloo(two_ranks):
    results = two_ranks("average")
    assert results[0] == results[1] == [1.5] * 6


def test_equal_replicas_pass(two_ranks):
    assert two_ranks("equal") == {0: 0.0, 1: 0.0}


def test_drifted_replicas_fail_on_every_rank(two_ranks):
    results = two_ranks("drift")
    for rank in (0, 1):
        assert results[rank].startswith("Replicas differ after training")
        assert "not all-reduced" in results[rank]


def test_gather_objects_in_rank_order(two_ranks):
    results = two_ranks("gather")
    assert results[0] == results[1] == [{"rank": 0}, {"rank": 1}]
