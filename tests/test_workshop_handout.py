"""The hand-out loop of docs/workshop-stack.md ("Hand out the seats"), run as the page writes it
with a stand-in for the AWS CLI on PATH: each seat's file holds its own three keys; a refused
AssumeRole stops the loop there and writes no file for that seat or any after it; an answer with
empty keys writes nothing; a role session (IAM Identity Center) asks for no more than the hour role
chaining allows, an IAM user for the hours asked; a second run rewrites the files in place."""
from __future__ import annotations

import configparser
import json
import os
import re
import subprocess
import sys

import pytest

from tests.paths import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "workshop-stack.md"
USER = "arn:aws:iam::111122223333:user/instructor"
ROLE_SESSION = "arn:aws:sts::111122223333:assumed-role/AWSReservedSSO_Admin_0123/instructor@example.org"

AWS_STAND_IN = """#!{python}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["AWS_CALLS"], "a") as calls:
    calls.write(json.dumps(args) + "\\n")
def value(flag):
    return args[args.index(flag) + 1]
if args[:2] == ["sts", "get-caller-identity"]:
    print(os.environ["CALLER"])
elif args[:2] == ["cloudformation", "describe-stacks"]:
    query = value("--query")
    if "Learner" in query:
        seat = query.split("Learner")[1][:2]
        print(f"arn:aws:iam::111122223333:role/trn-class/trn-class-Learner{{seat}}Role-ABC")
    else:
        print("Lab01Open\\techo ...")
elif args[:2] == ["sts", "assume-role"]:
    seat = value("--role-session-name").removeprefix("trn-class.learner")
    if seat in os.environ.get("REFUSE", "").split(","):
        sys.exit("An error occurred (AccessDenied) when calling the AssumeRole operation")
    if seat in os.environ.get("EMPTY", "").split(","):
        print("None\\tNone\\tNone")
    else:
        print(f"ASIA{{seat}}\\tsecret{{seat}}\\ttoken{{seat}}")
else:
    sys.exit("unexpected call: " + " ".join(args))
"""


def handout_block() -> str:
    section = PAGE.read_text().split("## Hand out the seats\n", 1)[1]
    (block,) = re.findall(r"```bash\n(.*?)```", section.split("\n## ", 1)[0], re.S)[:1]
    assert "seats=20" in block and "set -euo pipefail" in block
    return block.replace("seats=20", "seats=3")


def run(tmp_path, caller=USER, **env):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "aws").write_text(AWS_STAND_IN.format(python=sys.executable))
    (bin_dir / "aws").chmod(0o755)
    calls = tmp_path / "calls.jsonl"
    calls.unlink(missing_ok=True)
    result = subprocess.run(["bash", "-c", handout_block()], cwd=tmp_path, capture_output=True, text=True,
                            timeout=60, env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
                                             "AWS_CALLS": str(calls), "CALLER": caller, **env})
    made = [json.loads(line) for line in calls.read_text().splitlines()]
    return result, made


def credentials(tmp_path, seat: str) -> dict:
    parser = configparser.ConfigParser()
    parser.read(tmp_path / f"learner{seat}.credentials")
    return dict(parser["default"])


def durations(made) -> list[str]:
    return [c[c.index("--duration-seconds") + 1] for c in made if c[:2] == ["sts", "assume-role"]]


def test_every_seat_gets_its_own_keys_readable_by_the_instructor_alone(tmp_path):
    result, made = run(tmp_path)
    assert result.returncode == 0, result.stderr
    for seat in ("01", "02", "03"):
        assert credentials(tmp_path, seat) == {
            "region": "us-east-1", "aws_access_key_id": f"ASIA{seat}",
            "aws_secret_access_key": f"secret{seat}", "aws_session_token": f"token{seat}"}
        assert (tmp_path / f"learner{seat}.credentials").stat().st_mode & 0o077 == 0
    assert durations(made) == ["14400"] * 3  # an IAM user: the 4 hours asked
    assert not list(tmp_path.glob("*.tmp"))


def test_a_refused_assume_role_stops_the_loop_and_writes_no_file_for_it(tmp_path):
    result, made = run(tmp_path, REFUSE="02")
    assert result.returncode != 0 and "AccessDenied" in result.stderr
    assert (tmp_path / "learner01.credentials").exists()
    assert not (tmp_path / "learner02.credentials").exists() and not (tmp_path / "learner03.credentials").exists()
    assert [c[c.index("--role-session-name") + 1] for c in made if c[:2] == ["sts", "assume-role"]] == [
        "trn-class.learner01", "trn-class.learner02"]
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("seat", ["01", "03"])
def test_an_answer_with_no_keys_writes_nothing(tmp_path, seat):
    result, _ = run(tmp_path, EMPTY=seat)
    assert result.returncode != 0 and f"seat {seat}: AssumeRole returned no keys" in result.stderr
    assert not (tmp_path / f"learner{seat}.credentials").exists()
    assert not list(tmp_path.glob("*.tmp"))


def test_a_role_session_asks_for_the_hour_role_chaining_allows(tmp_path):
    result, made = run(tmp_path, caller=ROLE_SESSION)
    assert result.returncode == 0, result.stderr
    assert durations(made) == ["3600"] * 3
    assert "a role session: credentials for 1 hour, not 4" in result.stdout


def test_a_second_run_rewrites_each_file_in_place(tmp_path):
    run(tmp_path)
    (tmp_path / "learner02.credentials").write_text("[default]\naws_access_key_id = expired\n")
    result, _ = run(tmp_path)
    assert result.returncode == 0, result.stderr
    assert credentials(tmp_path, "02")["aws_access_key_id"] == "ASIA02"
    assert sorted(p.name for p in tmp_path.glob("learner*")) == [
        "learner01.credentials", "learner02.credentials", "learner03.credentials"]
