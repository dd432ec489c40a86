"""Time and cost per epoch: each stage's own results next to the AWS MLP tutorial's trn1 figures.

Prices and the published figures live in helpers/data/trn1_costs.json, each with its source and
date; nothing here knows a price.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from mnist_mlp.common.data import TRAIN_IMAGES

COST_DATA = Path(__file__).parents[1] / "data" / "trn1_costs.json"
TUTORIAL_BATCH = 32  # the tutorial's and the scripts' batch size
NOT_STATED = "not stated"  # a published run's instance where the tutorial names none: not priced


@dataclass(frozen=True)
class Price:
    instance: str
    usd_per_hour: float
    kind: str  # "on demand", "RI-effective"
    pricing: str
    source: str
    as_of: str

    def short(self) -> str:
        return f"${self.usd_per_hour:g}/h {self.kind}"

    def cite(self) -> str:
        return f"{self.instance} ${self.usd_per_hour:g}/h {self.pricing}, as of {self.as_of} ({self.source})"


def load_cost_data(path=COST_DATA) -> dict:
    """The data file, checked: every price and published run has what the table needs."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: cannot read the cost data ({err}); restore it with "
                         f"`git checkout -- {path.name}` or fix the JSON") from None
    needs = {"prices": ("instance", "usd_per_hour", "kind", "pricing", "source", "as_of"),
             "published_runs": ("run", "stage", "workers", "throughput_it_s", "instance", "source")}
    for section, keys in needs.items():
        for i, entry in enumerate(data.get(section) or [None]):
            missing = [k for k in keys if not isinstance(entry, dict) or k not in entry]
            if missing:
                raise ValueError(f"{path}: {section}[{i}] lacks {', '.join(missing)}: every "
                                 f"entry needs {', '.join(keys)} (a figure without its source "
                                 f"and date is not shown)")
    return data


def price(instance: str = "trn1.2xlarge", data: dict | None = None) -> Price:
    data = data or load_cost_data()
    for entry in data["prices"]:
        if entry["instance"] == instance:
            return Price(**{k: entry[k] for k in Price.__dataclass_fields__})
    known = ", ".join(e["instance"] for e in data["prices"])
    raise KeyError(f"no price for {instance} in {COST_DATA.name} (it has {known}): add one, "
                   f"with its source and date")


def published(data: dict | None = None) -> dict[str, dict]:
    """The tutorial's runs by stage (cpu, xla, torchrun_w1, torchrun_w2): it/s per worker, the
    label the tutorial prints over each log, its source."""
    data = data or load_cost_data()
    runs = {run["stage"]: run for run in data["published_runs"]}
    return {"cpu": data["published_cpu_it_s"], **runs}


def trn1_figure(stage: str, data: dict | None = None) -> str:
    """The tutorial's figure for a stage, said with the instance its log names: what a notebook
    prints beside a throughput of its own ('95 it/s, the AWS MLP tutorial's log labelled
    trn1.32xlarge')."""
    runs = published(data)
    if stage not in runs:
        raise KeyError(f"the AWS MLP tutorial logs no {stage!r} run (it logs {', '.join(runs)}): "
                       f"a notebook says so instead of printing a figure")
    run = runs[stage]
    where = (f"labelled {run['instance']}" if run["instance"] != NOT_STATED
             else "which names no instance")
    each = " per worker" if run.get("workers", 1) > 1 else ""
    return f"{run['throughput_it_s']:.0f} it/s{each}, the AWS MLP tutorial's log {where}"


def steps_per_epoch(workers: int, batch_size: int = TUTORIAL_BATCH) -> int:
    """Steps each worker takes per epoch (each worker sees its 1/workers of the set; the last
    short batch is dropped on XLA)."""
    return TRAIN_IMAGES // workers // batch_size


def epoch_seconds(throughput_it_s: float, workers: int, batch_size: int = TUTORIAL_BATCH) -> float:
    if not throughput_it_s or not math.isfinite(throughput_it_s) or throughput_it_s <= 0:
        return math.nan
    return steps_per_epoch(workers, batch_size) / throughput_it_s


def cost_rows(results: dict, on_neuron: bool, data: dict | None = None,
              instance: str = "trn1.2xlarge") -> list[dict]:
    """One row per run, priced at the rate of the instance it ran on: the stages this machine ran
    (only on Neuron, at `instance`'s rate: a stand-in's time is not a trn1's) and the AWS
    tutorial's published runs whose instance it names (at that instance's rate; the others are
    not priced: unpriced_runs says which)."""
    data = data or load_cost_data()
    runs = [(stage, instance, r.world_size, r.throughput_it_s, r.batch_size)
            for stage, r in results.items()] if on_neuron else []
    runs += [(run["run"], run["instance"], run["workers"], run["throughput_it_s"], TUTORIAL_BATCH)
             for run in data["published_runs"] if run["instance"] != NOT_STATED]
    rows = []
    for what, where, workers, throughput, batch_size in runs:
        rate = price(where, data)
        seconds = epoch_seconds(throughput, workers, batch_size)
        rows.append({"what": what, "instance": where, "workers": workers,
                     "throughput_it_s": throughput, "epoch_s": seconds, "rate": rate.short(),
                     "usd_per_epoch": seconds * rate.usd_per_hour / 3600})
    return rows


def at_learners_rate(rows: list[dict], data: dict | None = None, instance: str = "trn1.2xlarge") -> str:
    """Two lines: the epochs of cost_rows priced at another instance's rate, re-priced at
    `instance`'s (the learner's trn1.2xlarge, on demand), on the assumption its NeuronCores run
    them as fast (these runs use one or two cores; a trn1.2xlarge has two), and that rate's source."""
    rate = price(instance, data)
    runs = [f"{r['what']} ${r['epoch_s'] * rate.usd_per_hour / 3600:.4f}" for r in rows
            if r["instance"] != instance]
    if not runs:
        return ""
    return (f"Modelled, not measured: the same epochs on a {instance} at {rate.short()}, if its two "
            f"NeuronCores run them as fast: {'; '.join(runs)}\n  (rate: {rate.cite()})")


def unpriced_runs(data: dict | None = None) -> str:
    """One line naming the tutorial's runs left out of the table: it names no instance for them."""
    runs = [f"{run['run']} ({run['throughput_it_s']:.0f} it/s)"
            for run in (data or load_cost_data())["published_runs"] if run["instance"] == NOT_STATED]
    return ("Not priced, the tutorial names no instance for it: " + "; ".join(runs)) if runs else ""


def stand_in_epoch_times(results: dict) -> str:
    """The stand-in's own epoch times, one line, unpriced: this machine is not a trn1."""
    times = [f"{stage} {epoch_seconds(r.throughput_it_s, r.world_size, r.batch_size):.1f} s"
             for stage, r in results.items()]
    return ("This machine's epochs (the CPU stand-in, not priced): " + ", ".join(times)
            if times else "")


def format_cost_rows(rows: list[dict]) -> str:
    from helpers.show.tables import text_table

    return text_table([[r["what"], r["instance"], f"{r['throughput_it_s']:.0f}",
                        f"{r['epoch_s']:.1f} s", r["rate"], f"${r['usd_per_epoch']:.4f}"]
                       for r in rows],
                      ["run", "instance", "it/s each", "epoch", "rate", "$/epoch"],
                      right={2, 3, 5}, rule=True)
