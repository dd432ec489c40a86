#!/usr/bin/env bash
# `make slurm`: Debian's slurm-wlm and munge for tests/test_slurm.py, which starts a controller
# and two nodes of its own on the loopback address, with its own slurm.conf and munge key, and
# stops them (it uses none of the services the packages may enable where systemd runs). Installed
# only when missing, and only as root: slurmd must run as root, so elsewhere the test is skipped
# anyway (GitHub's hosted runner is not root). Without apt-get it says what to install.
set -uo pipefail

missing=()
for command in munged slurmctld slurmd sbatch; do
    command -v "$command" >/dev/null || missing+=("$command")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "Slurm for the Slurm test: $(slurmd -V 2>/dev/null || echo slurmd), $(munged -V 2>&1 | head -n 1)"
    exit 0
fi
packages="slurm-wlm munge"
if ! command -v apt-get >/dev/null; then
    echo "No apt-get here: install $packages (Slurm 22.05 or later) by hand; make test skips the Slurm test."
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "Not root: the Slurm test needs root (slurmd) and is skipped; not installing $packages."
    exit 0
fi
echo "Installing $packages (missing: ${missing[*]})"
apt-get update -q && env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $packages \
    || echo "Could not install $packages: make test skips the Slurm test (under CI=true it fails)."
exit 0
