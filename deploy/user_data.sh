#!/bin/bash
# deploy/user_data.sh: the user data of every workshop lab (deploy/workshop.yaml embeds this file
# unchanged after a header that exports the LAB_* values below; tests/test_workshop_stack.py holds
# the two equal). Clones the workbook at the ref, runs its deploy/bootstrap.sh, and reports to
# CloudFormation: cfn-signal with bootstrap's exit status, so the stack waits for every lab and
# fails at once, not after its timeout, when one fails (its log: `aws ec2 get-console-output`).
set -uo pipefail
: "${LAB_STACK:?}" "${LAB_REGION:?}" "${LAB_RESOURCE:?}" "${LAB_REPOSITORY_URL:?}"
: "${LAB_REPOSITORY_REF:?}" "${LAB_IDLE_MINUTES:?}" "${LAB_TOKEN_PARAMETER?}" "${LAB_CACHE_ARCHIVE?}"
# Seams for tests (docs/workshop-stack.md): who owns the lab, where it lives, the DLAMI venv.
export LAB_USER=${LAB_USER:-ubuntu}
export LAB_DLAMI_VENV=${LAB_DLAMI_VENV:-/opt/aws_neuronx_venv_pytorch_2_9}
LAB_HOME=$(getent passwd "$LAB_USER" | cut -d: -f6)
export LAB_REPO_DIR=${LAB_REPO_DIR:-$LAB_HOME/workbook}
LAB_LOG=${LAB_LOG:-/var/log/workshop-lab.log}
LAB_TOOLS=${LAB_TOOLS:-/opt/workshop-lab/tools}
CFN_BOOTSTRAP=https://s3.amazonaws.com/cloudformation-examples/aws-cfn-bootstrap-py3-latest.tar.gz

# Everything below also goes to cloud-init's log and the console (get-console-output).
exec > >(tee -a "$LAB_LOG") 2>&1

as_lab_user() {
    if [ "$(id -un)" = "$LAB_USER" ]; then "$@"; else sudo -u "$LAB_USER" -H -- "$@"; fi
}

# cfn-signal and the AWS CLI, each installed only when missing (with the DLAMI venv's pip, into a
# directory of their own: the DLAMI venv itself is never written to).
install_tool() {  # install_tool COMMAND PIP-REQUIREMENT
    command -v "$1" >/dev/null && return 0
    echo "workshop lab: installing $1 into $LAB_TOOLS"
    "$LAB_DLAMI_VENV/bin/python" -m pip install -q --disable-pip-version-check --target "$LAB_TOOLS" "$2" \
        || return 1
    printf '#!/bin/sh\nPYTHONPATH=%s exec %s %s "$@"\n' "$LAB_TOOLS" "$LAB_DLAMI_VENV/bin/python" \
        "$LAB_TOOLS/bin/$1" > "/usr/local/bin/$1"
    chmod 755 "/usr/local/bin/$1"
}

report() {
    local status=$?
    trap - EXIT
    if [ "$status" -eq 0 ]; then
        echo "workshop lab: ready; signalling CloudFormation"
    else
        echo "workshop lab: FAILED (exit status $status), the lines above say where; the whole log" \
             "is $LAB_LOG. Signalling CloudFormation."
    fi
    cfn-signal -e "$status" --stack "$LAB_STACK" --resource "$LAB_RESOURCE" --region "$LAB_REGION"
    exit "$status"
}

echo "workshop lab $LAB_RESOURCE of stack $LAB_STACK: $(date -u +%FT%TZ)"
install_tool cfn-signal "$CFN_BOOTSTRAP" || { echo "workshop lab: cannot install cfn-signal"; exit 1; }
trap report EXIT
install_tool aws awscli || exit 1

if [ ! -d "$LAB_REPO_DIR/.git" ]; then
    echo "workshop lab: cloning $LAB_REPOSITORY_URL at $LAB_REPOSITORY_REF into $LAB_REPO_DIR"
    # A branch or tag clones directly; a commit id needs the default branch first.
    as_lab_user git clone --quiet --branch "$LAB_REPOSITORY_REF" "$LAB_REPOSITORY_URL" "$LAB_REPO_DIR" \
        2>/dev/null || {
        as_lab_user git clone --quiet "$LAB_REPOSITORY_URL" "$LAB_REPO_DIR" &&
            as_lab_user git -C "$LAB_REPO_DIR" checkout --quiet --detach "$LAB_REPOSITORY_REF"
    } || { echo "workshop lab: cannot clone $LAB_REPOSITORY_URL at $LAB_REPOSITORY_REF"; exit 1; }
fi
bash "$LAB_REPO_DIR/deploy/bootstrap.sh"
