"""The workshop stack (docs/workshop-stack.md): workshop.yaml, the CloudFormation template; the
user data it embeds (user_data.sh) and the bootstrap it runs from the clone (bootstrap.sh); the
idle stop each lab runs every minute (idle_stop). Imports helpers (who holds a NeuronCore).
Beside it, slurm/: stage 3 as a Slurm job (docs/parallelcluster.md), shell scripts only."""
