"""The end of a run, as every stage does it: the sample's result lines, the checkpoint, test
accuracy, and the results record (one schema, written here and read by the notebooks)."""
from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from mnist_mlp.common.atomic_files import atomic_save, atomic_write_json
from mnist_mlp.common.evaluation import evaluate, report_accuracy
from mnist_mlp.common.paths import default_checkpoint_dir
from mnist_mlp.common.tracking import StepTracker, TrainingDiverged, print_training_result

RESULTS_GLOB = "results_*.json"


@dataclass
class RunResults:
    """What one stage's run measured: checkpoints/results_<stage>.json."""
    stage: str  # cpu, xla, torchrun_w<N>, bf16_<mode>
    backend: str
    world_size: int
    epochs: int
    steps: int
    batch_size: int
    lr: float
    loader: str
    throughput_it_s: float  # per worker, after warm-up
    final_loss: float
    test_accuracy: float
    wall_time_s: float
    loss_history: list  # [[step, loss], ...] (rank 0's under torchrun)
    # XLA stages: the graphs first met before evaluation (torch-xla's UncachedCompile), each
    # compiled or loaded from the compile cache, and the seconds that took (CompileTime)
    new_graphs: int | None = None
    new_graphs_time_s: float | None = None
    device_loader: bool | None = None  # xla
    precision: str | None = None  # bf16 stages
    gradient_reduce: str | None = None  # torchrun: "xla" or "gloo"
    throughput_by_rank: list | None = None
    samples_per_epoch_by_rank: list | None = None
    loss_history_by_rank: dict | None = None

    def write(self, directory) -> Path:
        return atomic_write_json(dataclasses.asdict(self), results_path(directory, self.stage))

    @classmethod
    def read(cls, path) -> "RunResults":
        """Read and check one results file; a bad one raises ValueError naming it and the fix."""
        path = Path(path)
        fix = "re-run the stage that writes it to replace it"
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"{path} cannot be read as results JSON ({err}); {fix}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path} holds a {type(data).__name__}, not a results object; {fix}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        required = [n for n, f in fields.items() if f.default is dataclasses.MISSING]
        missing = [k for k in required if k not in data]
        unknown = [k for k in data if k not in fields]
        if missing or unknown:
            what = "; ".join(filter(None, [missing and f"lacks {', '.join(missing)}",
                                           unknown and f"has unknown {', '.join(unknown)}"]))
            raise ValueError(f"{path} {what}: another version of the scripts wrote it; {fix}")
        stage = path.stem.removeprefix("results_")
        if data["stage"] != stage:
            raise ValueError(f"{path} says stage {data['stage']!r} but its name says {stage!r}; "
                             f"rename it or {fix}")
        return cls(**data)


def results_path(directory, stage: str) -> Path:
    return Path(directory) / f"results_{stage}.json"


def load_all(directory=None) -> dict[str, RunResults]:
    """Every results_<stage>.json in `directory` (default: the checkpoint dir), by stage."""
    directory = Path(directory) if directory is not None else default_checkpoint_dir()
    found = (RunResults.read(p) for p in sorted(directory.glob(RESULTS_GLOB)))
    return {r.stage: r for r in found}


def check_model_finite(model) -> None:
    """Refuse to save a model with a NaN or infinite weight (copies to the CPU: no device graph)."""
    for name, tensor in model.state_dict().items():
        if not torch.isfinite(tensor.detach().cpu()).all():
            raise TrainingDiverged(f"training diverged: {name} holds NaN or infinite values. "
                                   f"Nothing was saved (the last good checkpoint is kept). "
                                   f"Lower --lr and run again.")


def finish_run(stage: str, args, backend, model, tracker: StepTracker, test_loader, *,
               started: float, write: bool = True, world_size: int = 1, **extra) -> RunResults | None:
    """After the loop, as in the sample: result lines, checkpoint, end line; then test accuracy
    over all 10,000 test images and the results record. write=False on ranks other than 0:
    they stop after the end line (the replicas are equal, so rank 0's accuracy is everyone's).

    On XLA it first prints the new graphs so far, before evaluation adds its own (`New graphs before
    evaluation: N (compiled or loaded from the cache in X s)`, every rank: torch-xla's
    UncachedCompile and CompileTime, which count a compile-cache hit as well as a neuronx-cc
    compile) and records them; --device-loader and --precision go into the record when given."""
    if backend.uses_xla:
        from mnist_mlp.common.xla_metrics import compile_stats

        graphs, seconds = compile_stats()
        print(f"New graphs before evaluation: {graphs} (compiled or loaded from the cache in {seconds:.2f} s)")
        extra = dict(new_graphs=graphs, new_graphs_time_s=seconds, **extra)
    for flag in ("device_loader", "precision"):  # None: a flag this stage does not take
        if vars(args).get(flag) is not None:
            extra.setdefault(flag, vars(args)[flag])
    print_training_result(tracker)  # raises TrainingDiverged on a non-finite final loss
    check_model_finite(model)
    directory = Path(args.checkpoint_dir)
    if write:
        atomic_save({"state_dict": model.state_dict()}, directory / f"checkpoint_{stage}.pt",
                    xla=backend.uses_xla)
    print("----------End Training ---------------")
    if not write:
        return None
    correct, total = evaluate(model, test_loader, backend.device)
    results = RunResults(
        stage=stage, backend=backend.name, world_size=world_size, epochs=args.epochs,
        steps=tracker.steps, batch_size=args.batch_size, lr=args.lr, loader=args.loader,
        throughput_it_s=tracker.throughput, final_loss=tracker.final_loss,
        test_accuracy=report_accuracy(correct, total),
        wall_time_s=time.perf_counter() - started, loss_history=tracker.loss_history, **extra)
    results.write(directory)
    return results
