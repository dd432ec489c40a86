#!/bin/bash
# deploy/user_data.sh: the user data of every workshop lab (deploy/workshop.yaml embeds this file
# unchanged after a header that exports the LAB_* values below; tests/test_workshop_stack.py holds
# the two equal). Clones the workbook at the commit (from RepositoryUrl, or from the class bundle
# in S3: docs/workshop-stack.md, "The class bundle"), runs its deploy/bootstrap.sh, and signals the
# lab's wait condition: curl PUTs {"Status": "SUCCESS", "Data": "ready" or "FAILED: <reason>"} to
# the presigned URL of its handle, as CloudFormation documents. The trap that sends it is set before
# anything can fail and needs only bash and curl, so every failure (installing the AWS CLI, the
# clone, the bundle, bootstrap's steps) is reported at once with its reason, never after the timeout.
# A failed lab fails its seat, not the class: the stack goes on, and the seat's LabNNStatus output
# says why (docs/workshop-stack.md, "One bad lab, one seat").
set -uo pipefail
LAB_LOG=${LAB_LOG:-/var/log/workshop-lab.log}
stage="starting"
log_start=$(($(stat -c %s "$LAB_LOG" 2>/dev/null || echo 0) + 1))  # this boot's lines start here
this_boot() { tail -c "+$log_start" "$LAB_LOG" 2>/dev/null; }

json_string() {  # json_string TEXT: TEXT as a JSON string (quotes, backslashes, control characters)
    local text=$1
    text=${text//\\/\\\\}
    text=${text//\"/\\\"}
    text=${text//$'\n'/\\n}
    text=${text//$'\t'/\\t}
    printf '"%s"' "$(printf '%s' "$text" | tr -d '\000-\037')"
}

signal() {  # signal SUCCESS REASON DATA: PUT to the wait condition handle's URL
    local body
    body="{\"Status\":\"$1\",\"Reason\":$(json_string "$2"),\"UniqueId\":$(json_string "${LAB_RESOURCE:-lab}"),\"Data\":$(json_string "$3")}"
    curl -fsS --retry 5 --retry-connrefused --max-time 30 -X PUT -H 'Content-Type:' \
        --data-binary "$body" "${LAB_SIGNAL_URL:?no wait condition URL: cannot signal}"
}

report() {
    local status=$? reason last
    trap - EXIT
    if [ "$status" -eq 0 ]; then
        echo "workshop lab: ready; signalling CloudFormation"
        signal SUCCESS "$LAB_RESOURCE is ready: JupyterLab answers on 127.0.0.1" "ready" || status=1
    else
        # The step bootstrap was in (its last "N/5" line), else this script's stage, and the log's
        # last lines, which say why (bootstrap's fail() message, a tool's error).
        last=$(this_boot | grep -a -o 'workshop lab: [0-9]/5 .*' | tail -n 1)
        last=${last#workshop lab: }
        reason="$LAB_RESOURCE failed at ${last:-$stage} (exit status $status): $(this_boot | tail -n 4 \
            | tr '\n' ' ' | tail -c 700)"
        echo "workshop lab: FAILED (exit status $status), the lines above say where; the whole log" \
             "is $LAB_LOG. Signalling CloudFormation."
        # SUCCESS to CloudFormation (this lab has finished booting), FAILED in the data its seat's
        # LabNNStatus output shows: a FAILURE would fail the stack, and with it every other lab.
        # The data also carries the log's last 30 lines (under 4 KB in all), where the cause often is.
        signal SUCCESS "$reason" "FAILED: $reason | the log's last lines: $(this_boot | tail -n 30 | tail -c 2800)"
    fi
    exit "$status"
}
trap report EXIT

# Everything below also goes to the log, cloud-init's log and the console (get-console-output).
exec > >(tee -a "$LAB_LOG") 2>&1
stage="checking the user data's values"
: "${LAB_STACK:?}" "${LAB_REGION:?}" "${LAB_RESOURCE:?}" "${LAB_SIGNAL_URL:?}" "${LAB_REPOSITORY_URL?}"
: "${LAB_REPOSITORY_COMMIT:?}" "${LAB_IDLE_MINUTES:?}" "${LAB_TOKEN_PARAMETER?}" "${LAB_CACHE_ARCHIVE?}"
: "${LAB_BUNDLE?}"
[ -n "$LAB_BUNDLE$LAB_REPOSITORY_URL" ] || { echo "workshop lab: neither BundleUrl nor RepositoryUrl given"; exit 1; }
# Seams for tests (docs/workshop-stack.md): who owns the lab, where it lives, the DLAMI venv.
export LAB_USER=${LAB_USER:-ubuntu}
export LAB_DLAMI_VENV=${LAB_DLAMI_VENV:-/opt/aws_neuronx_venv_pytorch_2_9}
LAB_HOME=$(getent passwd "$LAB_USER" | cut -d: -f6)
export LAB_REPO_DIR=${LAB_REPO_DIR:-$LAB_HOME/workbook}
LAB_TOOLS=${LAB_TOOLS:-/opt/workshop-lab/tools}
LAB_BUNDLE_DIR=${LAB_BUNDLE_DIR:-/opt/workshop-lab/bundle}

as_lab_user() {
    if [ "$(id -un)" = "$LAB_USER" ]; then "$@"; else sudo -u "$LAB_USER" -H -- "$@"; fi
}

# The AWS CLI, installed only when missing (with the DLAMI venv's pip, into a directory of its
# own: the DLAMI venv itself is never written to), at a pinned version: nothing the boot installs
# as root floats.
AWSCLI_REQUIREMENT="awscli==1.46.3"
install_tool() {  # install_tool COMMAND PIP-REQUIREMENT
    command -v "$1" >/dev/null && return 0
    echo "workshop lab: installing $1 into $LAB_TOOLS"
    "$LAB_DLAMI_VENV/bin/python" -m pip install -q --disable-pip-version-check --target "$LAB_TOOLS" "$2" \
        || { echo "workshop lab: cannot install $1 with $LAB_DLAMI_VENV/bin/python -m pip"; return 1; }
    printf '#!/bin/sh\nPYTHONPATH=%s exec %s %s "$@"\n' "$LAB_TOOLS" "$LAB_DLAMI_VENV/bin/python" \
        "$LAB_TOOLS/bin/$1" > "/usr/local/bin/$1"
    chmod 755 "/usr/local/bin/$1"
}

echo "workshop lab $LAB_RESOURCE of stack $LAB_STACK: $(date -u +%FT%TZ)"

# The way out, checked before anything needs it (docs/workshop-stack.md, "The network"). From
# RepositoryUrl, the AWS CLI, the clone, `make venv data` and MNIST come from the internet, through
# a NAT gateway (or a public address and an internet gateway): any HTTP answer shows a route out;
# none within LAB_NETWORK_SECONDS fails the lab at once, saying what to give the subnet. From the
# class bundle they all come through the S3 gateway endpoint, as the classroom cache does: no way
# out is needed, and none is probed.
LAB_NETWORK_SECONDS=${LAB_NETWORK_SECONDS:-20}
if [ -z "$LAB_BUNDLE" ] && [[ $LAB_REPOSITORY_URL == https://* ]]; then
    stage="checking the way out to the internet"
    curl -sS -o /dev/null -I --max-time "$LAB_NETWORK_SECONDS" "$LAB_REPOSITORY_URL" || {
        echo "workshop lab: no way out: $LAB_REPOSITORY_URL did not answer within $LAB_NETWORK_SECONDS s." \
             "Give this lab's subnet a route 0.0.0.0/0 to a NAT gateway (PublicIpv4 false), or to an" \
             "internet gateway with PublicIpv4 true, or boot the labs from a class bundle (BundleUrl;" \
             "docs/workshop-stack.md, The network)."
        exit 1
    }
fi
# The S3 gateway endpoint serves its own Region only. S3 names a bucket's Region in the
# x-amz-bucket-region header of its answer to a HEAD of the bucket, signed or not, refused or not.
check_bucket_region() {  # check_bucket_region s3://BUCKET/KEY WHAT PARAMETER
    local bucket=${1#s3://} region
    bucket=${bucket%%/*}
    stage="checking $2's bucket is in $LAB_REGION"
    region=$(curl -sS -o /dev/null -D - -I --max-time "$LAB_NETWORK_SECONDS" \
        "https://s3.$LAB_REGION.amazonaws.com/$bucket" | tr -d '\r' | sed -n 's/^x-amz-bucket-region: *//Ip' | head -n 1)
    if [ -n "$region" ] && [ "$region" != "$LAB_REGION" ]; then
        echo "workshop lab: $2's bucket $bucket is in $region, not in the stack's Region" \
             "$LAB_REGION: the S3 gateway endpoint serves its own Region only, and the lab's credentials work" \
             "only through the endpoints. Copy it to a bucket in $LAB_REGION and give that as $3."
        exit 1
    fi
    [ -n "$region" ] || echo "workshop lab: S3 did not name the Region of $bucket: not checked"
}
if [[ $LAB_CACHE_ARCHIVE == s3://* ]]; then check_bucket_region "$LAB_CACHE_ARCHIVE" "the classroom cache" ClassroomCacheUrl; fi
if [[ $LAB_BUNDLE == s3://* ]]; then check_bucket_region "$LAB_BUNDLE" "the class bundle" BundleUrl; fi

# An S3 object with the lab role's credentials and curl alone (its SigV4 signing: Ubuntu 24.04's
# curl 8.5 signs the token and payload headers), for an image without the AWS CLI: the bundle
# brings the CLI, so it cannot fetch itself with it. S3 wants the payload's sha256 (an empty GET's).
s3_get() {  # s3_get s3://BUCKET/KEY FILE
    local imds=http://169.254.169.254/latest imds_token role credentials bucket=${1#s3://}
    if command -v aws >/dev/null; then
        aws s3 cp --only-show-errors --region "$LAB_REGION" "$1" "$2"
        return
    fi
    imds_token=$(curl -fsS -X PUT -H "X-aws-ec2-metadata-token-ttl-seconds: 300" "$imds/api/token") \
        && role=$(curl -fsS -H "X-aws-ec2-metadata-token: $imds_token" "$imds/meta-data/iam/security-credentials/") \
        && credentials=$(curl -fsS -H "X-aws-ec2-metadata-token: $imds_token" "$imds/meta-data/iam/security-credentials/$role") \
        || return 1
    field() { printf '%s' "$credentials" | sed -n "s/.*\"$1\" *: *\"\([^\"]*\)\".*/\1/p"; }
    curl -fsS --retry 3 -o "$2" --aws-sigv4 "aws:amz:$LAB_REGION:s3" \
        --user "$(field AccessKeyId):$(field SecretAccessKey)" -H "x-amz-security-token: $(field Token)" \
        -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" \
        "https://s3.$LAB_REGION.amazonaws.com/${bucket%%/*}/${bucket#*/}"
}

repository=$LAB_REPOSITORY_URL
if [ -n "$LAB_BUNDLE" ]; then
    # Fetched as root into a directory the lab user may read, not write; a local file in tests.
    stage="fetching the class bundle $LAB_BUNDLE"
    bundle=$LAB_BUNDLE
    if [[ $LAB_BUNDLE == s3://* ]]; then
        bundle=$(mktemp -d)/class-bundle.tar.gz
        s3_get "$LAB_BUNDLE" "$bundle" || { echo "workshop lab: cannot fetch the class bundle $LAB_BUNDLE"; exit 1; }
    fi
    # Only the git bundle first: git checks every object it clones, and the clone's own
    # deploy/bundle.py then checks the whole bundle against its manifest.
    scratch=$(mktemp -d) && chmod 755 "$scratch"
    tar -xzf "$bundle" -C "$scratch" --no-same-owner repository.bundle && chmod 644 "$scratch/repository.bundle" \
        || { echo "workshop lab: $LAB_BUNDLE holds no readable repository.bundle: make it with make class-bundle"; exit 1; }
    repository=$scratch/repository.bundle
fi

if [ ! -d "$LAB_REPO_DIR/.git" ]; then
    stage="cloning $repository at $LAB_REPOSITORY_COMMIT"
    echo "workshop lab: $stage into $LAB_REPO_DIR"
    as_lab_user git clone --quiet --no-checkout "$repository" "$LAB_REPO_DIR" \
        && as_lab_user git -C "$LAB_REPO_DIR" checkout --quiet --detach "$LAB_REPOSITORY_COMMIT" \
        || { echo "workshop lab: cannot clone $repository at commit $LAB_REPOSITORY_COMMIT"; exit 1; }
fi
# bootstrap.sh runs as root from the clone: only as the commit itself, checked out and unchanged.
# This is the first boot (user data runs once), before any learner can reach the lab.
stage="checking the clone is $LAB_REPOSITORY_COMMIT, unchanged"
head=$(as_lab_user git -C "$LAB_REPO_DIR" rev-parse HEAD) && changed=$(as_lab_user git -C "$LAB_REPO_DIR" status --porcelain) \
    || { echo "workshop lab: cannot read the clone $LAB_REPO_DIR"; exit 1; }
if [ "$head" != "$LAB_REPOSITORY_COMMIT" ] || [ -n "$changed" ]; then
    echo "workshop lab: $LAB_REPO_DIR is not commit $LAB_REPOSITORY_COMMIT unchanged (HEAD $head; changes: ${changed:-none}): not running it as root"
    exit 1
fi
if [ -n "$LAB_BUNDLE" ]; then
    # Checked whole (every member's size and sha256 against the manifest, the commit, the wheels'
    # Python) by the commit's own code, run by the DLAMI venv's root-owned python, then unpacked.
    # pip then installs from its wheels only, bootstrap copies its MNIST, and imports its cache.
    stage="unpacking the class bundle into $LAB_BUNDLE_DIR"
    [ -x "$LAB_DLAMI_VENV/bin/python" ] || { echo "workshop lab: $LAB_DLAMI_VENV is missing: this is not the Neuron 2.31
'Deep Learning AMI Neuron PyTorch 2.9 (Ubuntu 24.04)'. Launch the stack with that AMI."; exit 1; }
    (cd "$LAB_REPO_DIR" && "$LAB_DLAMI_VENV/bin/python" -E -s -B -m deploy.bundle unpack "$bundle" "$LAB_BUNDLE_DIR" \
        --commit "$LAB_REPOSITORY_COMMIT") || exit 1
    export LAB_BUNDLE_DIR PIP_NO_INDEX=1 PIP_FIND_LINKS=$LAB_BUNDLE_DIR/wheels
    if [ -z "$LAB_CACHE_ARCHIVE" ] && [ -f "$LAB_BUNDLE_DIR/classroom-cache.tar.gz" ]; then
        export LAB_CACHE_ARCHIVE=$LAB_BUNDLE_DIR/classroom-cache.tar.gz
    fi
fi

stage="installing the AWS CLI"
install_tool aws "$AWSCLI_REQUIREMENT" || exit 1

[ -n "$LAB_BUNDLE" ] || LAB_BUNDLE_DIR=""  # bootstrap reads an empty one as: no bundle
stage="running deploy/bootstrap.sh"
bash "$LAB_REPO_DIR/deploy/bootstrap.sh"
