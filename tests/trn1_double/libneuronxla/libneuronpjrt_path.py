"""The Neuron PJRT plugin's path, as torch-xla 2.9 asks for it to tell a Neuron host. The
double's plugin is never loaded (its client runs on the CPU: torch_neuronx/runtime.py)."""
from pathlib import Path


def libneuronpjrt_path() -> str:
    return str(Path(__file__).resolve().parent / "libneuronpjrt.so")
