#!/bin/bash
# deploy/bootstrap.sh: makes this machine a workshop lab, run as root by deploy/user_data.sh from the
# clone it made (docs/workshop-stack.md). In order, each step stopping the lab with its reason:
#   1. the Neuron 2.31 PyTorch 2.9 DLAMI venv is there (no other torch is ever downloaded here);
#   2. `make venv data` as the lab user: .venv layered on the DLAMI venv, refused when the DLAMI
#      venv's torch, torch-xla, torchvision, torch-neuronx or neuronx-cc are not the pinned ones
#      (helpers/setup/venv_plan.py), then MNIST; from a class bundle (LAB_BUNDLE_DIR), pip reads
#      only its wheels and MNIST is its files;
#   3. the classroom compile cache imported, when an archive is given (s3:// or a local file);
#   4. JupyterLab as the systemd service workshop-lab (`make lab` on 127.0.0.1 with a token of
#      its own, as the lab user), and the idle-stop timer workshop-idle (python -m
#      deploy.idle_stop, every minute, as root: from a root-owned copy of this commit's code, run
#      by the DLAMI venv's root-owned python, so nothing the learner can edit runs as root);
#   5. JupyterLab's page served with that token; the token written to the stack's SSM parameter
#      (deploy/publish_token.sh), and again by the timer workshop-token whenever the parameter
#      holds anything else (a stack update writes its placeholder back).
# Environment (user_data.sh sets these): LAB_USER, LAB_DLAMI_VENV, LAB_IDLE_MINUTES,
# LAB_CACHE_ARCHIVE (may be empty), LAB_TOKEN_PARAMETER (empty: not published), LAB_REGION,
# LAB_BUNDLE_DIR (the unpacked class bundle; empty: pip and MNIST from the internet).
# Seams for tests: LAB_PORT, LAB_CONFIG_DIR, LAB_SYSTEMD_DIR, LAB_IDLE_DIR, LAB_READY_SECONDS; `systemctl`,
# `aws` and `curl` are found on PATH.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LAB_USER=${LAB_USER:-ubuntu}
LAB_DLAMI_VENV=${LAB_DLAMI_VENV:-/opt/aws_neuronx_venv_pytorch_2_9}
LAB_PORT=${LAB_PORT:-8888}
LAB_CONFIG_DIR=${LAB_CONFIG_DIR:-/etc/workshop-lab}
LAB_SYSTEMD_DIR=${LAB_SYSTEMD_DIR:-/etc/systemd/system}
LAB_IDLE_DIR=${LAB_IDLE_DIR:-/opt/workshop-lab/idle-stop}
LAB_READY_SECONDS=${LAB_READY_SECONDS:-180}
LAB_CACHE_ARCHIVE=${LAB_CACHE_ARCHIVE:-}
LAB_TOKEN_PARAMETER=${LAB_TOKEN_PARAMETER:-}
LAB_REGION=${LAB_REGION:-}
LAB_BUNDLE_DIR=${LAB_BUNDLE_DIR:-}
: "${LAB_IDLE_MINUTES:?}"

step() { echo "workshop lab: $*"; }
fail() { echo "workshop lab: $*" >&2; exit 1; }
as_lab_user() {
    if [ "$(id -un)" = "$LAB_USER" ]; then "$@"; else sudo -u "$LAB_USER" -H -- "$@"; fi
}

step "1/5 the DLAMI venv $LAB_DLAMI_VENV"
[ -x "$LAB_DLAMI_VENV/bin/python" ] || fail "$LAB_DLAMI_VENV is missing: this is not the Neuron 2.31
'Deep Learning AMI Neuron PyTorch 2.9 (Ubuntu 24.04)'. Launch the stack with that AMI."

step "2/5 make venv data (pins checked against the DLAMI venv)"
offline=()
if [ -n "$LAB_BUNDLE_DIR" ]; then
    # sudo passes no PIP_* variable on: env does. MNIST's files, checked at unpack, where make data
    # looks first (it checks their md5 and downloads nothing).
    offline=(env PIP_NO_INDEX=1 "PIP_FIND_LINKS=$LAB_BUNDLE_DIR/wheels")
    as_lab_user install -d "$repo/data/MNIST/raw"
    as_lab_user install -m 644 -t "$repo/data/MNIST/raw" "$LAB_BUNDLE_DIR"/mnist/*
fi
as_lab_user "${offline[@]}" make --no-print-directory -C "$repo" venv data DLAMI_VENV="$LAB_DLAMI_VENV"
python=$repo/.venv/bin/python

if [ -n "$LAB_CACHE_ARCHIVE" ]; then
    step "3/5 the classroom compile cache from $LAB_CACHE_ARCHIVE"
    archive=$LAB_CACHE_ARCHIVE
    if [[ $archive == s3://* ]]; then
        archive=$(mktemp -d)/classroom-cache.tar.gz
        aws s3 cp --only-show-errors --region "$LAB_REGION" "$LAB_CACHE_ARCHIVE" "$archive"
        chmod a+r "$archive" && chmod a+x "$(dirname "$archive")"
    fi
    (cd "$repo" && as_lab_user "$python" -m helpers.cache import --no-progress "$archive")
else
    step "3/5 no classroom compile cache given: each graph compiles on first use"
fi

step "4/5 JupyterLab (workshop-lab.service) and the idle stop (workshop-idle.timer)"
install -d -m 755 "$LAB_CONFIG_DIR"
env_file=$LAB_CONFIG_DIR/lab.env
if [ ! -s "$env_file" ]; then  # a lab keeps its token across stops, starts and re-runs
    (umask 077 && echo "JUPYTER_TOKEN=$("$python" -c 'import secrets; print(secrets.token_hex(24))')" \
        > "$env_file")
fi
token=$(sed -n 's/^JUPYTER_TOKEN=//p' "$env_file")
make=$(command -v make)
# The idle stop's code, copied from the commit (not the working tree) into a directory only root
# may write; its interpreter is the DLAMI venv's (root-owned), with -E -s: no PYTHON* variable, no
# user site. The learner's clone and .venv, which they may edit, are never on its path.
rm -rf "$LAB_IDLE_DIR" && install -d -m 755 "$LAB_IDLE_DIR"
as_lab_user git -C "$repo" archive --format=tar HEAD deploy helpers mnist_mlp | tar -x -C "$LAB_IDLE_DIR"
if [ "$(id -u)" -eq 0 ]; then chown -R root:root "$LAB_IDLE_DIR"; fi
chmod -R go-w "$LAB_IDLE_DIR"
cat > "$LAB_SYSTEMD_DIR/workshop-lab.service" <<EOF
[Unit]
Description=JupyterLab of the Trainium workbook, on 127.0.0.1:$LAB_PORT (workshop lab)
After=network-online.target
Wants=network-online.target

[Service]
User=$LAB_USER
WorkingDirectory=$repo
EnvironmentFile=$env_file
Environment=PATH=/opt/aws/neuron/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ExecStart=$make --no-print-directory lab LAB_IP=127.0.0.1 LAB_PORT=$LAB_PORT LAB_ARGS=--no-browser
Restart=on-failure
RestartSec=5

[Install]
WantedBy=multi-user.target
EOF
cat > "$LAB_SYSTEMD_DIR/workshop-idle.service" <<EOF
[Unit]
Description=Stop this workshop lab after $LAB_IDLE_MINUTES idle minutes (python -m deploy.idle_stop)

[Service]
Type=oneshot
WorkingDirectory=$LAB_IDLE_DIR
EnvironmentFile=$env_file
ExecStart=$LAB_DLAMI_VENV/bin/python -E -s -m deploy.idle_stop --port $LAB_PORT --idle-minutes $LAB_IDLE_MINUTES
EOF
if [ -n "$LAB_TOKEN_PARAMETER" ]; then
    cat > "$LAB_SYSTEMD_DIR/workshop-token.service" <<EOF
[Unit]
Description=Put this workshop lab's JupyterLab token back into $LAB_TOKEN_PARAMETER when it holds anything else

[Service]
Type=oneshot
EnvironmentFile=$env_file
Environment=LAB_TOKEN_PARAMETER=$LAB_TOKEN_PARAMETER
Environment=LAB_REGION=$LAB_REGION
ExecStart=/bin/bash $LAB_IDLE_DIR/deploy/publish_token.sh
EOF
    cat > "$LAB_SYSTEMD_DIR/workshop-token.timer" <<EOF
[Unit]
Description=Check every 5 minutes that this workshop lab's token is the one published

[Timer]
OnBootSec=2min
OnUnitActiveSec=5min

[Install]
WantedBy=timers.target
EOF
fi
cat > "$LAB_SYSTEMD_DIR/workshop-idle.timer" <<EOF
[Unit]
Description=Check every minute whether this workshop lab is idle

[Timer]
OnBootSec=5min
OnUnitActiveSec=1min

[Install]
WantedBy=timers.target
EOF
systemctl daemon-reload
systemctl enable --now workshop-lab.service workshop-idle.timer
if [ -n "$LAB_TOKEN_PARAMETER" ]; then systemctl enable --now workshop-token.timer; fi

step "5/5 waiting for JupyterLab's page on 127.0.0.1:$LAB_PORT/lab"
for _ in $(seq "$LAB_READY_SECONDS"); do
    if curl -fs -o /dev/null --max-time 10 -H "Authorization: token $token" \
            "http://127.0.0.1:$LAB_PORT/lab"; then
        if [ -n "$LAB_TOKEN_PARAMETER" ]; then
            JUPYTER_TOKEN=$token LAB_TOKEN_PARAMETER=$LAB_TOKEN_PARAMETER LAB_REGION=$LAB_REGION \
                bash "$LAB_IDLE_DIR/deploy/publish_token.sh"
        fi
        step "JupyterLab answers on 127.0.0.1:$LAB_PORT"
        exit 0
    fi
    sleep 1
done
fail "JupyterLab did not serve 127.0.0.1:$LAB_PORT/lab within $LAB_READY_SECONDS s:
$(systemctl status --no-pager workshop-lab.service 2>&1 | tail -n 20)"
