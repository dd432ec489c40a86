#!/bin/bash
# One node's part of train_torchrun.sbatch, which srun runs on every node of the job:
#     torchrun_node.sh MASTER_ADDR MASTER_PORT [train_torchrun.py arguments]
# Slurm numbers the nodes (SLURM_NODEID, 0 = the rendezvous host) and counts them (SLURM_NNODES).
# It runs in the clone on the shared file system (sbatch checks every node sees it).
set -euo pipefail
master_addr="$1" master_port="$2"
shift 2
# workers: this node's NeuronCores (or WORKERS_PER_NODE; 1 on the CPU stand-in); on a Neuron
# node also `export FI_PROVIDER=efa ...`, the EFA variables of docs/multi-node.md.
plan="$("$PYTHON" -m helpers.launch.slurm node-env)"
eval "$plan"
# A Neuron node compiles into one cache on the shared file system: nodes come and go (MinCount
# 0), and a new node's own /var/tmp cache is empty, so every job would compile again.
if [ "$neuron_cores" -gt 0 ]; then
    export NEURON_COMPILE_CACHE_URL="${NEURON_COMPILE_CACHE_URL:-$PWD/neuron-compile-cache}"
fi
echo "node $SLURM_NODEID ($SLURMD_NODENAME): $workers worker(s), $neuron_cores NeuronCore(s)${FI_PROVIDER:+, FI_PROVIDER=$FI_PROVIDER}"
exec "$PYTHON" -m torch.distributed.run --nproc_per_node="$workers" \
    --nnodes="$SLURM_NNODES" --node_rank="$SLURM_NODEID" \
    --master_addr="$master_addr" --master_port="$master_port" \
    --rdzv_conf=timeout="$RDZV_TIMEOUT" --tee=3 \
    mnist_mlp/train_torchrun.py "$@"
