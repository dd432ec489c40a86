"""The class's first morning, on the expanded template for 3 and 40 seats: every lab
waits for the stack's VPC endpoints, every call its Systems Manager agent makes on its own schedule
is allowed (so none is denied and mailed as an alert), and the user data checks the way out before
anything needs it: a subnet with no route to the internet, or a classroom cache in a bucket of
another Region, fails the lab at once with a reason that says what to do. The user data is the
expanded template's own, run with stand-ins for curl and git on PATH (no network is touched)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.iam_policy import Request
from tests.test_workshop_access import (
    BUNDLE,
    CACHE,
    agent_schedule,
    allowed,
    expand,
    instance_arn,
    lab_caller,
    largest_class,
    policies,
    seat_tags,
    seats,
)


def class_of(count: int):
    return largest_class() if count == 40 else expand(count, ClassroomCacheUrl=CACHE)


@pytest.mark.parametrize("count", [3, 40])
def test_every_lab_waits_for_every_endpoint(count):
    stack = class_of(count)
    endpoints = set(stack.of_type("AWS::EC2::VPCEndpoint"))
    assert len(endpoints) == 4
    for seat in seats(stack):
        assert set(stack.resources[f"Lab{seat}"]["DependsOn"]) == endpoints, seat


@pytest.mark.parametrize("count", [3, 40])
def test_the_agents_scheduled_calls_are_allowed_on_every_lab_and_only_for_itself(count):
    stack = class_of(count)
    every = seats(stack)
    for seat in every:
        lab = policies(stack, f"Lab{seat}Role")
        for call in agent_schedule(stack, seat):
            assert allowed(stack, lab, call), (seat, call.action)
        neighbour = every[(every.index(seat) + 1) % len(every)]
        if neighbour != seat:  # the association poll of another lab's instance is refused
            other = Request("ssm:ListInstanceAssociations", instance_arn(stack, neighbour),
                            {**lab_caller(stack, seat), **seat_tags(stack, neighbour)})
            assert not allowed(stack, lab, other), (seat, neighbour)


CURL = """#!{python}
import json, os, sys
args = sys.argv[1:]
if "PUT" in args:  # the wait condition's signal
    with open(os.environ["SIGNALS"], "a") as signals:
        signals.write(args[args.index("--data-binary") + 1] + "\\n")
    sys.exit(0)
url = args[-1]
with open(os.environ["REQUESTS"], "a") as seen:
    seen.write(url + "\\n")
if url.startswith("https://s3."):  # a HEAD of the cache's bucket: S3 names its Region
    print("HTTP/1.1 403 Forbidden\\r\\nx-amz-bucket-region: " + os.environ["BUCKET_REGION"] + "\\r\\n\\r")
    sys.exit(0)
sys.exit(int(os.environ["CURL_EXIT"]))  # 28: timed out, as with no route out
"""
# Instance metadata (IMDSv2: a token, the role's name, its credentials) and S3, for a lab without
# the AWS CLI; every call's arguments kept, one JSON list per line.
SIGV4_CURL = """#!{python}
import json, os, sys
args = sys.argv[1:]
url = args[-1]
with open(os.environ["REQUESTS"], "a") as seen:
    seen.write(json.dumps(args) + "\\n")
if "--data-binary" in args:  # the wait condition's signal
    with open(os.environ["SIGNALS"], "a") as signals:
        signals.write(args[args.index("--data-binary") + 1] + "\\n")
elif url == "http://169.254.169.254/latest/api/token":
    print("imds-token", end="")
elif url == "http://169.254.169.254/latest/meta-data/iam/security-credentials/":
    print("teststack-Lab03Role", end="")
elif url == "http://169.254.169.254/latest/meta-data/iam/security-credentials/teststack-Lab03Role":
    print(json.dumps({{"Code": "Success", "AccessKeyId": "ASIAEXAMPLE", "SecretAccessKey": "se/cret+1",
                      "Token": "session-token"}}, indent=2))
elif "--aws-sigv4" in args:
    with open(args[args.index("-o") + 1], "wb") as out:
        out.write(b"not a bundle")
elif url.startswith("https://s3."):
    print("HTTP/1.1 403 Forbidden\\r\\nx-amz-bucket-region: us-east-1\\r\\n\\r")
"""
GIT = "#!/bin/sh\necho \"git stand-in: $*\" >&2\nexit 1\n"


def run_user_data(tmp_path: Path, stack, seat: str, curl_exit: int, bucket_region: str, curl: str = CURL,
                  aws: bool = True) -> tuple[list, str]:
    """Lab `seat`'s user data as the expanded stack wrote it, up to its first failure; the signals
    it PUT and its log. aws False: no AWS CLI on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("curl", curl.format(python=sys.executable)), ("git", GIT), ("aws", "#!/bin/sh\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    path = f"{bin_dir}:{os.environ['PATH']}"
    if not aws:
        (bin_dir / "aws").unlink()
        path = ":".join(d for d in path.split(":") if not (Path(d) / "aws").exists())
    script = tmp_path / "user-data"
    script.write_text(stack.resources[f"Lab{seat}"]["Properties"]["UserData"])  # Fn::Base64 kept as text
    signals, log = tmp_path / "signals.jsonl", tmp_path / "lab.log"
    env = {**os.environ, "PATH": path, "SIGNALS": str(signals),
           "REQUESTS": str(tmp_path / "requests"), "CURL_EXIT": str(curl_exit), "BUCKET_REGION": bucket_region,
           "LAB_USER": subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip(),
           "LAB_LOG": str(log), "LAB_REPO_DIR": str(tmp_path / "workbook"), "LAB_TOOLS": str(tmp_path / "tools")}
    subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    return [json.loads(line) for line in signals.read_text().splitlines()], log.read_text()


@pytest.mark.parametrize("count", [3, 40])
def test_a_subnet_with_no_way_out_fails_the_lab_at_once_saying_what_to_do(tmp_path, count):
    stack = class_of(count)
    seat = seats(stack)[-1]
    (signal,), log = run_user_data(tmp_path, stack, seat, curl_exit=28, bucket_region="us-east-1")
    assert signal["Data"].startswith("FAILED: ") and signal["UniqueId"] == f"Lab{seat}"
    assert signal["Reason"].startswith(f"Lab{seat} failed at checking the way out to the internet")
    said = signal["Reason"] + signal["Data"]
    assert "https://example.org/workbook.git did not answer within 20 s" in said
    assert "route 0.0.0.0/0 to a NAT gateway" in said and "installing" not in log


@pytest.mark.parametrize("count", [3, 40])
def test_a_cache_in_another_region_fails_the_lab_at_once_saying_what_to_do(tmp_path, count):
    stack = class_of(count)
    seat = seats(stack)[-1]
    (signal,), _ = run_user_data(tmp_path, stack, seat, curl_exit=0, bucket_region="eu-west-1")
    assert signal["Data"].startswith("FAILED: ")
    assert "checking the classroom cache's bucket is in us-east-1" in signal["Reason"]
    assert "class-bucket is in eu-west-1, not in the stack's Region us-east-1" in signal["Reason"] + signal["Data"]
    assert "https://s3.us-east-1.amazonaws.com/class-bucket" in (tmp_path / "requests").read_text()


def test_with_a_way_out_and_the_cache_in_the_region_the_lab_goes_on(tmp_path):
    """Both checks pass: the lab goes on to the clone (which the git stand-in refuses here)."""
    stack = class_of(3)
    (signal,), log = run_user_data(tmp_path, stack, "02", curl_exit=0, bucket_region="us-east-1")
    assert signal["Data"].startswith("FAILED: ") and "failed at cloning" in signal["Reason"], signal
    assert "no way out" not in log and "not in the stack's Region" not in log


def test_a_lab_booting_from_the_class_bundle_needs_no_way_out(tmp_path):
    """No route out (curl times out): the lab probes none and goes on to fetch the bundle
    through the S3 gateway endpoint (the aws stand-in fetches nothing here); a bundle in another
    Region fails it at once, as the cache does."""
    stack = expand(3, BundleUrl=BUNDLE, RepositoryUrl="")
    seat = seats(stack)[-1]
    (signal,), log = run_user_data(tmp_path, stack, seat, curl_exit=28, bucket_region="us-east-1")
    assert signal["Data"].startswith("FAILED: "), signal
    assert signal["Reason"].startswith(f"Lab{seat} failed at fetching the class bundle {BUNDLE}"), signal
    assert "no way out" not in log and "checking the way out" not in log
    assert "https://s3.us-east-1.amazonaws.com/class-bucket" in (tmp_path / "requests").read_text()
    (tmp_path / "elsewhere").mkdir()
    (signal,), _ = run_user_data(tmp_path / "elsewhere", stack, seat, curl_exit=28, bucket_region="eu-west-1")
    assert "class bundle's bucket class-bucket is in eu-west-1" in signal["Reason"] + signal["Data"]
    assert "give that as BundleUrl" in signal["Reason"] + signal["Data"]


def test_without_the_aws_cli_a_lab_fetches_the_bundle_with_curl_signing_as_its_role(tmp_path):
    """The bundle brings the AWS CLI, so a lab without one fetches it with curl: IMDSv2 for the
    role's credentials, then a GET signed with them (SigV4), through the S3 gateway endpoint."""
    stack = expand(3, BundleUrl=BUNDLE, RepositoryUrl="")
    (signal,), _ = run_user_data(tmp_path, stack, "03", curl_exit=0, bucket_region="us-east-1",
                                 curl=SIGV4_CURL, aws=False)
    calls = [json.loads(line) for line in (tmp_path / "requests").read_text().splitlines()]
    token, role, credentials, get = [c for c in calls if "169.254.169.254" in c[-1] or "--aws-sigv4" in c]

    def headers(call):
        return {call[i + 1] for i, arg in enumerate(call) if arg == "-H"}

    assert token[token.index("-X") + 1] == "PUT" and "X-aws-ec2-metadata-token-ttl-seconds: 300" in headers(token)
    assert all("X-aws-ec2-metadata-token: imds-token" in headers(c) for c in (role, credentials))
    assert get[-1] == "https://s3.us-east-1.amazonaws.com/class-bucket/class-bundle.tar.gz"
    assert get[get.index("--aws-sigv4") + 1] == "aws:amz:us-east-1:s3"
    assert get[get.index("--user") + 1] == "ASIAEXAMPLE:se/cret+1"
    assert {"x-amz-security-token: session-token",
            "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"} <= headers(get)
    # what it fetched is no bundle: the lab fails there, saying so
    assert signal["Data"].startswith("FAILED: ") and "holds no readable repository.bundle" in signal["Reason"], signal
