"""The double's Neuron runtime in one process: the cores read at torch-neuronx's set-up (import)
and reserved at the first device use, graphs handed to the compile cache after each step,
gradients all-reduced by xm.optimizer_step.

How: torch-xla runs on its CPU client (PJRT_DEVICE=CPU only while that client is created, so the
processes this one starts still see PJRT_DEVICE=NEURON, as on a trn1), writing each graph it
compiles into a private persistent-cache directory; the file names there are the graphs' hashes.
"""
import atexit
import fcntl
import importlib.abc
import importlib.machinery
import os
import shutil
import sys
import tempfile
from pathlib import Path

from trn1_platform import compile_cache, rules

_state = {"started": False, "seen": set(), "xla_cache": None, "fds": [], "group": None,
          "compiling": 0, "core_env": None}
CORE_VARIABLES = ("NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES")


def read_core_variables() -> dict[str, str]:
    """The runtime's core variables as the double reads them: once, at torch-neuronx's set-up
    (torch_neuronx/xla.py says why then)."""
    if _state["core_env"] is None:
        _state["core_env"] = {name: os.environ[name] for name in CORE_VARIABLES if name in os.environ}
    return _state["core_env"]


def reserve_cores() -> list[int]:
    """docs/sources.md, "By default a process's Neuron runtime reserves every NeuronCore present,
    until the process exits": one flock per core, held by this process until it exits (the
    kernel drops flocks of a killed process too); the device node stays open meanwhile, so
    /proc/<pid>/fd shows this process as a holder, as on a trn1. The cores are those the
    variables named when they were read (read_core_variables); a value set after that is not
    seen, and the journal records it ("set_after_read")."""
    read = read_core_variables()
    wanted = rules.requested_cores(read)
    lock_dir = rules.platform_root() / "run/neuron"
    lock_dir.mkdir(parents=True, exist_ok=True)
    later = {name: os.environ.get(name) for name in CORE_VARIABLES if os.environ.get(name) != read.get(name)}
    noted = {"read": read, **({"set_after_read": later} if later else {}),
             **({"set_up_set": _state["set_up_set"]} if _state.get("set_up_set") else {})}
    if isinstance(wanted, int):  # NEURON_RT_NUM_CORES: "reserve the number of free NeuronCores"
        taken = []
        for core in range(rules.machine_cores()):
            if len(taken) < wanted and (fd := _try_lock(lock_dir / f"nc{core}.lock")) is not None:
                taken.append((core, fd))
        if len(taken) < wanted:
            for _, fd in taken:
                os.close(fd)
            line = rules.BUSY_CORE_LINE.format(first=0, last=wanted - 1, available=len(taken))
            print(line, file=sys.stderr, flush=True)
            compile_cache.journal("refused", cores=wanted, **noted)
            raise RuntimeError(line)
        cores = [core for core, _ in taken]
        _state["fds"] = [fd for _, fd in taken] + [os.open(rules.platform_root() / "dev/neuron0", os.O_RDONLY)]
        compile_cache.journal("reserved", cores=cores, **noted)
        return cores
    cores = wanted
    taken = []
    for core in cores:
        fd = os.open(lock_dir / f"nc{core}.lock", os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            for held in taken:
                os.close(held)
            free = sum(1 for c in cores if _is_free(lock_dir / f"nc{c}.lock"))
            line = rules.BUSY_CORE_LINE.format(first=cores[0], last=cores[-1], available=free)
            print(line, file=sys.stderr, flush=True)
            compile_cache.journal("refused", cores=cores, **noted)
            raise RuntimeError(line) from None
        taken.append(fd)
    taken.append(os.open(rules.platform_root() / "dev/neuron0", os.O_RDONLY))
    _state["fds"] = taken
    compile_cache.journal("reserved", cores=cores, **noted)
    return cores


def _try_lock(lock: Path) -> int | None:
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd
    except BlockingIOError:
        os.close(fd)
        return None


def _is_free(lock: Path) -> bool:
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def start(create_client) -> None:
    """The first device use: reserve the cores, then create the CPU client."""
    if _state["started"]:
        return
    reserve_cores()
    os.environ["PJRT_DEVICE"] = "CPU"
    try:
        create_client()
    finally:
        os.environ["PJRT_DEVICE"] = "NEURON"
    _state["started"] = True
    atexit.register(hand_new_graphs)


def hand_new_graphs() -> None:
    """Each graph compiled since the last look goes to the compile cache, in file-time order."""
    xla_cache = _state["xla_cache"]
    if xla_cache is None or not xla_cache.is_dir():
        return
    new = [p for p in xla_cache.iterdir() if p.name not in _state["seen"] and p.is_file()]
    for path in sorted(new, key=lambda p: p.stat().st_mtime_ns):
        _state["seen"].add(path.name)
        graph_hash = str(int(path.name) % 2**64)
        _state["compiling"] = 1  # see counter_value below
        try:
            compile_cache.on_graph(graph_hash, path.read_bytes(),
                                   say=lambda line: print(line, file=sys.stderr, flush=True))
        finally:
            _state["compiling"] = 0


def counting_the_neuron_compile(real_counter_value):
    """On a trn1 neuronx-cc runs inside torch-xla's compile (the compiler wrapper is called from
    it), after UncachedCompile counts the graph and before CompileTime samples it; the double
    compiles after the step instead, so while it does, UncachedCompile reads one more."""
    def counter_value(name):
        value = real_counter_value(name)
        if name == "UncachedCompile" and _state["compiling"]:
            return (value or 0) + 1
        return value
    return counter_value


def _gloo_group():
    import torch.distributed as dist

    if _state["group"] is None:
        _state["group"] = dist.new_group(backend="gloo")
    return _state["group"]


def reduce_gradients(optimizer, groups=None, pin_layout=True):
    """docs/sources.md, "xm.optimizer_step all-reduces the gradients across workers": on Neuron
    the all-reduce is part of the step's graph. The CPU client holds no all-reduce across
    processes, so the double averages over torchrun's workers outside the graph (its own gloo
    sum of CPU copies), which cuts each step into more graphs than a trn1 compiles: the journal
    says so ("reduced-outside-graph") and the pass reports such a notebook's compile count as
    undecided."""
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return
    if not _state.get("reduced"):
        _state["reduced"] = True
        compile_cache.journal("reduced-outside-graph", world=world)
    group = _gloo_group()
    for param_group in optimizer.param_groups:
        for p in param_group["params"]:
            if p.grad is not None:
                total = p.grad.detach().cpu()
                dist.all_reduce(total, group=group)
                p.grad.copy_((total / world).to(p.grad.device))


def invalid_outputs() -> None:
    """neuron_parallel_compile's trial: NEURON_EXTRACT_GRAPHS_ONLY makes a run "execute empty
    stubs with zero outputs" (docs/sources.md, "Under neuron_parallel_compile the trial's outputs
    are zeros"; the tool's page: "the outputs are invalid"): every value read back from the
    device is zero here."""
    import torch

    real = {name: getattr(torch.Tensor, name) for name in ("cpu", "item", "tolist", "to", "__float__")}

    def cpu(self, *args, **kwargs):
        out = real["cpu"](self, *args, **kwargs)
        return torch.zeros_like(out) if self.device.type == "xla" else out

    def to(self, *args, **kwargs):
        out = real["to"](self, *args, **kwargs)
        return torch.zeros_like(out) if self.device.type == "xla" and out.device.type == "cpu" else out

    def item(self):
        return real["item"](cpu(self)) if self.device.type == "xla" else real["item"](self)

    def tolist(self):
        return real["tolist"](cpu(self)) if self.device.type == "xla" else real["tolist"](self)

    def as_float(self):
        return real["__float__"](cpu(self)) if self.device.type == "xla" else real["__float__"](self)

    torch.Tensor.cpu, torch.Tensor.to, torch.Tensor.item, torch.Tensor.tolist = cpu, to, item, tolist
    torch.Tensor.__float__ = as_float


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches a torch_xla module once it has loaded: torch-neuronx's set-up runs while torch_xla
    itself is still loading, before torch_xla.runtime or xla_model exist."""

    def __init__(self, patches):
        self.patches = patches

    def find_spec(self, name, path, target=None):
        patch = self.patches.pop(name, None)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            patch(module)
        spec.loader.exec_module = exec_module
        return spec


def _patch_xla_model(xm) -> None:
    xm.reduce_gradients = reduce_gradients


def _patch_runtime(xr) -> None:
    if os.environ.get("TORCHELASTIC_RUN_ID"):  # a torchrun worker: the Neuron world is the job
        xr.world_size = lambda: int(os.environ.get("WORLD_SIZE", "1"))


def _patch_metrics(met) -> None:
    met.counter_value = counting_the_neuron_compile(met.counter_value)


def install(set_up_set=()) -> None:
    """torch-neuronx's set-up on the double (torch_neuronx.xla.init, during `import torch_xla`):
    read the runtime's core variables, and patch this process's torch-xla so the rules above
    apply."""
    if _state["xla_cache"] is not None:
        return
    read_core_variables()
    _state["set_up_set"] = list(set_up_set)  # the core variables torch-neuronx's set-up wrote
    # What children inherit, as on a trn1 (torch-xla finds libneuronpjrt there); this process
    # alone runs its client on the CPU (start()).
    os.environ["PJRT_DEVICE"] = "NEURON"
    # torch-xla reads its persistent-cache path when it first compiles: a private one for this
    # process (a process it starts sets its own here, so none reads another's).
    xla_cache = Path(tempfile.mkdtemp(prefix="trn1-double-xla-"))
    os.environ["XLA_PERSISTENT_CACHE_PATH"] = str(xla_cache)
    _state["xla_cache"] = xla_cache
    atexit.register(shutil.rmtree, xla_cache, ignore_errors=True)

    xlac = sys.modules["_XLAC"]  # torch_xla imports it before calling torch-neuronx's set-up
    real = {name: getattr(xlac, name) for name in
            ("_xla_get_default_device", "_xla_get_replication_devices_count", "_xla_step_marker")}

    def first_use(name):
        def call(*args, **kwargs):
            start(real["_xla_get_default_device"])
            return real[name](*args, **kwargs)
        return call

    def step_marker(*args, **kwargs):
        start(real["_xla_get_default_device"])
        result = real["_xla_step_marker"](*args, **kwargs)
        hand_new_graphs()
        return result

    xlac._xla_get_default_device = first_use("_xla_get_default_device")
    xlac._xla_get_replication_devices_count = first_use("_xla_get_replication_devices_count")
    xlac._xla_step_marker = step_marker
    patches = {"torch_xla.core.xla_model": _patch_xla_model, "torch_xla.runtime": _patch_runtime,
               "torch_xla.debug.metrics": _patch_metrics}
    for name in [n for n in patches if n in sys.modules]:
        patches.pop(name)(sys.modules[name])
    sys.meta_path.insert(0, _PatchOnImport(patches))
    if os.environ.get("NEURON_EXTRACT_GRAPHS_ONLY") == "1":
        invalid_outputs()
