"""Time and cost per epoch: each stage's own results next to the AWS MLP tutorial's trn1 figures.

Prices and the published figures live in helpers/data/trn1_costs.json, each with its source and
date; nothing here knows a price.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from mnist_mlp.data import TRAIN_IMAGES

COST_DATA = Path(__file__).with_name("data") / "trn1_costs.json"
TUTORIAL_BATCH = 32  # the tutorial's and the scripts' batch size


@dataclass(frozen=True)
class Price:
    instance: str
    usd_per_hour: float
    pricing: str
    source: str
    as_of: str

    def cite(self) -> str:
        return f"{self.instance} ${self.usd_per_hour:.2f}/h {self.pricing}, as of {self.as_of} ({self.source})"


def load_cost_data(path=COST_DATA) -> dict:
    """The data file, checked: every price and published run has what the table needs."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: cannot read the cost data ({err}); restore it with "
                         f"`git checkout -- {path.name}` or fix the JSON") from None
    needs = {"prices": ("instance", "usd_per_hour", "pricing", "source", "as_of"),
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
    """One row per stage result (cost only when it ran on Neuron: a stand-in's time on this
    machine is not a trn1's) and one per published tutorial run (cost at `instance`'s price:
    those runs used one or two NeuronCores, which a trn1.2xlarge has)."""
    data = data or load_cost_data()
    rate = price(instance, data)
    rows = []
    for stage, r in results.items():
        seconds = epoch_seconds(r.throughput_it_s, r.world_size, r.batch_size)
        rows.append({"what": stage, "from": "this machine, Neuron" if on_neuron
                     else "this machine, CPU stand-in",
                     "workers": r.world_size, "throughput_it_s": r.throughput_it_s,
                     "epoch_s": seconds,
                     "usd_per_epoch": seconds * rate.usd_per_hour / 3600 if on_neuron else None})
    for run in data["published_runs"]:
        seconds = epoch_seconds(run["throughput_it_s"], run["workers"])
        rows.append({"what": run["run"], "from": f"AWS MLP tutorial ({run['instance']})",
                     "workers": run["workers"], "throughput_it_s": run["throughput_it_s"],
                     "epoch_s": seconds, "usd_per_epoch": seconds * rate.usd_per_hour / 3600})
    return rows


def format_cost_rows(rows: list[dict]) -> str:
    from helpers.tables import text_table

    def money(v):
        return "n/a (not a trn1)" if v is None else f"${v:.4f}"

    return text_table([[r["what"], r["from"], r["workers"], f"{r['throughput_it_s']:.0f} it/s",
                        f"{r['epoch_s']:.1f} s", money(r["usd_per_epoch"])] for r in rows],
                      ["run", "measured on", "workers", "per worker", "time/epoch", "cost/epoch"],
                      right={2, 3, 4, 5}, rule=True)
