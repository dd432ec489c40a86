"""The workbook's runtime: the stage scripts and what they share."""
import atexit
import gc

# At exit, skip the collector's last walk over the objects torch and torch_xla create when they
# load: about 2 s of CPU per process (each script, torchrun worker and kernel), spent on memory
# the process's end frees anyway.
atexit.register(gc.freeze)
