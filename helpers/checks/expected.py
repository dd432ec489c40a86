"""Every backend-dependent value the notebooks assert or print, in one place, keyed by backend.

A notebook asks `expect = expected(backend)` and asserts `run.new_graphs in
expect.train_graphs`, never a literal: a literal measured on the CPU stand-in is a failure
waiting for a learner on a trn1. Stand-in values are measured here
(tests/test_expected_stand_in.py and the notebooks re-check them); Neuron values cite the Neuron
docs of the pinned release, and say "inferred" where no published log shows the number itself.
`expect.source(name)` returns that citation, `expect.describe(name)` the value with it, for a
printed claim.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from mnist_mlp.common.precision import PRECISIONS

DOCS = "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.31.0/"
MLP_TUTORIAL = DOCS + "frameworks/torch/torch-neuronx/tutorials/training/mlp.html"
DEV_GUIDE = (DOCS + "frameworks/torch/torch-neuronx/programming-guide/training/"
             "pytorch-neuron-programming-guide.html")
CACHING = DOCS + "about-neuron/arch/neuron-features/neuron-caching.html"
BERT_TUTORIAL = DOCS + "frameworks/torch/torch-neuronx/tutorials/training/bert.html"
PARALLEL_COMPILE = (DOCS + "frameworks/torch/torch-neuronx/api-reference-guide/training/"
                    "pytorch-neuron-parallel-compile.html")
RUNTIME_CONFIG = DOCS + "neuron-runtime/guides/configuration-guide.html"
STAND_IN = ("measured on the CPU stand-in (PJRT_DEVICE=CPU, torch-xla 2.9.0); "
            "tests/test_expected_stand_in.py")
BACKENDS = ("neuron", "xla-cpu", "cpu")


@dataclass(frozen=True)
class Fact:
    value: object
    source: str
    inferred: bool = False  # True: reasoned from the docs, not read off a published log


# New graphs of one training run: the tutorial's 2022 log shows two NEFF compiles for
# train.py (MODULE_0_SyncTensorsGraph.318, MODULE_1_SyncTensorsGraph.390): PyTorch 1.x's
# zero_grad() zeroed the gradients, so step 1 (no .grad yet) traced another graph than step 2.
# PyTorch 2.x sets them to None (one graph, as the stand-in measures); 1 or 2 are both right.
_NEURON_TRAIN_GRAPHS = Fact(frozenset({1, 2}), f"{MLP_TUTORIAL} (its train.py log: two "
                            "NEFF compiles, from PyTorch 1.x; one with PyTorch 2.x)", inferred=True)

_XLA_CPU: dict[str, Fact] = dict(
    train_graphs=Fact(frozenset({1}), STAND_IN),
    bf16_graphs=Fact({mode: frozenset({1}) for mode in PRECISIONS}, STAND_IN),
    trial_graphs=Fact(frozenset({1}), STAND_IN),
    cache_layouts=Fact(frozenset({"xla"}), "torch-xla's own persistent cache "
                       "(torch_xla.runtime.initialize_cache); " + STAND_IN),
    cache_reused_across_processes=Fact(False, "the CPU PJRT client writes programs but cannot "
                                       "load them (\"Deserializing serialized executable not "
                                       "supported\"); " + STAND_IN),
    precompile_mode=Fact("stand-in", "no neuron_parallel_compile without Neuron: "
                         "helpers/cache/precompile.py runs the trial alone"),
    gradient_reduce=Fact("gloo", "torch_xla's CPU client has no cross-process all-reduce: "
                         "mnist_mlp/common/distributed.py averages over gloo; " + STAND_IN),
    neuron_cores_visible=Fact(range(0, 1), "no /dev/neuron* device on this machine"),
    kernel_holds_core_after_xla=Fact(False, "no NeuronCore exists, so none is held"),
    lr_change_recompiles=Fact(False, "the learning rate reaches the graph as device data, not a "
                              "constant: a second lr in one process adds no UncachedCompile; "
                              + STAND_IN),
)

_NEURON: dict[str, Fact] = dict(
    train_graphs=_NEURON_TRAIN_GRAPHS,
    bf16_graphs=Fact({mode: frozenset({1, 2}) for mode in PRECISIONS},
                     f"{MLP_TUTORIAL}: as train.py, one loop per mode", inferred=True),
    trial_graphs=_NEURON_TRAIN_GRAPHS,
    cache_layouts=Fact(frozenset({"neuronxcc", "legacy"}), f"{CACHING}: neuronxcc-<version>/"
                       f"MODULE_<hash>+<flags>/ entries; {MLP_TUTORIAL}: USER_neuroncc-* (2022 SDK)"),
    cache_reused_across_processes=Fact(True, f"{CACHING}: \"Using a cached neff at …\""),
    precompile_mode=Fact("neuron", PARALLEL_COMPILE),
    gradient_reduce=Fact("xla", f"{DEV_GUIDE}: xm.optimizer_step all-reduces the gradients "
                         "over the NeuronCores"),
    neuron_cores_visible=Fact(range(1, 129), f"{DEV_GUIDE}: a trn1 Trainium chip has two "
                              "NeuronCores; NEURON_RT_VISIBLE_CORES narrows them"),
    kernel_holds_core_after_xla=Fact(True, f"{RUNTIME_CONFIG}: the runtime takes its NeuronCores "
                                     "at start-up (nrt_init), exclusively, until the process "
                                     "exits"),
    lr_change_recompiles=Fact(False, f"{BERT_TUTORIAL}: \"You can adjust the following "
                              "hyperparameters without changing the model and causing "
                              "recompilation: … Learning rate (--lr option)\"; the caching guide's "
                              "\"optimizer hyperparameters\" are those baked in as constants",
                              inferred=True),
)

# Plain PyTorch compiles nothing and has no cache; values for the quantities that still apply.
_CPU = {**_XLA_CPU,
        "train_graphs": Fact(frozenset({0}), "plain PyTorch traces no graphs"),
        "trial_graphs": Fact(frozenset({0}), "plain PyTorch traces no graphs"),
        "bf16_graphs": Fact({mode: frozenset({0}) for mode in PRECISIONS},
                            "plain PyTorch traces no graphs")}

_TABLE = {"neuron": _NEURON, "xla-cpu": _XLA_CPU, "cpu": _CPU}


@dataclass(frozen=True)
class Expected:
    """The expected values for one backend: `expect.<quantity>`, `expect.source(<quantity>)`."""
    backend: str
    facts: dict = field(repr=False)

    def __getattr__(self, name: str):
        facts = self.__dict__.get("facts", {})
        if name in facts:
            return facts[name].value
        raise AttributeError(f"helpers.checks.expected has no quantity {name!r}; known: "
                             f"{', '.join(sorted(facts))} (add it, with its source, there)")

    def source(self, name: str) -> str:
        fact = self._fact(name)
        return ("inferred from " if fact.inferred else "") + fact.source

    def inferred(self, name: str) -> bool:
        return self._fact(name).inferred

    def describe(self, name: str) -> str:
        """'<value> on <backend> (<source>)', for a printed claim."""
        return f"{_show(self._fact(name).value)} on {self.backend} ({self.source(name)})"

    def _fact(self, name: str) -> Fact:
        if name not in self.facts:
            getattr(self, name)  # raises the one-line error
        return self.facts[name]


def _show(value) -> str:
    if isinstance(value, frozenset):
        return " or ".join(str(v) for v in sorted(value))
    if isinstance(value, range):
        return f"{value.start}" if len(value) == 1 else f"{value.start} to {value.stop - 1}"
    return str(value)


def expected(backend) -> Expected:
    """The Expected values for a mnist_mlp.common.backend.Backend or its name."""
    name = getattr(backend, "name", backend)
    if name not in _TABLE:
        raise ValueError(f"unknown backend {name!r}: pass a mnist_mlp.common.backend.Backend or one of "
                         f"{', '.join(BACKENDS)}")
    return Expected(name, _TABLE[name])


def add_quantity(name: str, *, neuron: Fact, xla_cpu: Fact, cpu: Fact | None = None) -> None:
    """Register one more backend-dependent quantity, with its source (cpu defaults to the
    stand-in's fact). Other notebooks' owners add theirs below."""
    if name in _XLA_CPU:
        raise ValueError(f"quantity {name!r} is already defined in helpers/checks/expected.py")
    _NEURON[name], _XLA_CPU[name], _CPU[name] = neuron, xla_cpu, cpu or xla_cpu


# --- Notebook 06 (look inside a run) -------------------------------------------------------
_MONITOR_GUIDE = DOCS + "tools/neuron-sys-tools/neuron-monitor-user-guide.html"
add_quantity(
    "utilization_source",
    neuron=Fact("neuron-monitor", f"{_MONITOR_GUIDE}: neuroncore_counters.neuroncores_in_use"
                "[<core>].neuroncore_utilization and memory_used per Neuron runtime"),
    xla_cpu=Fact("psutil", "no NeuronCore to measure: each torchrun worker's CPU % and RSS "
                 "(helpers/inside/utilization.py)"))
add_quantity(
    "runs_neuron_tools",
    neuron=Fact(True, DOCS + "tools/neuron-explorer/how-to-profile-workload.html"),
    xla_cpu=Fact(False, "neuron-monitor and neuron-explorer need the Neuron driver and runtime"))

_EAGER_DOC = "https://docs.pytorch.org/xla/release/r2.8/learn/eager.html"
add_quantity(
    "eager_step_graphs",
    neuron=Fact(frozenset({0}), DOCS + "frameworks/torch/torch-neuronx/programming-guide/training/"
                "pytorch-neuron-debug.html: NEURON_USE_EAGER_DEBUG_MODE=1 runs the ops one by one; "
                "as on any PJRT device, only torch_xla.compile-d functions become graphs",
                inferred=True),
    xla_cpu=Fact(frozenset({0}), f"{_EAGER_DOC}: per-op compiles count as EagerOp* metrics, not "
                 "as step graphs; " + STAND_IN))

# --- The classroom cache's graph record (helpers/classroom/graph_record.py) ------------------------------
add_quantity(
    "graph_record",
    neuron=Fact(None, f"{CACHING}: the cache keeps one neuronxcc-<version>/MODULE_<hash>+<flags>/ "
                "entry per compiled graph, keyed by its HLO module and the compiler flags; the "
                "stand-in's record does not apply on Trainium (Neuron's torch-xla may lower the "
                "same code to other HLO, and its PJRT plugin may ignore --xla_dump_to): `make "
                "notebooks` there writes a neuron record only where it dumps HLO, and `make "
                "classroom-check` checks a pass against the compile cache itself", inferred=True),
    xla_cpu=Fact("notebooks/classroom_graphs.json", "fingerprints of each graph's HLO before "
                 "optimization (helpers/classroom/graph_log.py), the same on every machine; " + STAND_IN))
