"""Starting processes from a notebook (notebooks 02-07): one runner that streams a command's
output with a deadline and stops its process group with it, even when the kernel is killed
(processes); torchrun and multi-node runs on top of it (torchrun); who has a file open (procfs).
Imports mnist_mlp only."""
