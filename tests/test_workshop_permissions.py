"""deploy/instructor-policy.json, the instructor's permissions, held to the template and the docs:
it is what `python -m deploy.instructor_policy` derives now; it allows every permission the
resource schemas list for creating, updating and deleting each resource of the expanded stack
(tests/cfn_expand.py) for 3 and 40 seats, so a new resource type cannot land without its
permissions; each action it holds comes from a resource type the stack makes, the stack's own
calls or a command the docs show; every `aws` command in the docs is sorted as the instructor's
or another's; its IAM calls reach the stack's own roles only; and it fits a managed policy."""
from __future__ import annotations

import copy
import re

import pytest

from deploy import instructor_policy as ip
from tests.cfn_expand import ACCOUNT, STACK
from tests.iam_policy import Request, actions_granted, allows
from tests.paths import REPO_ROOT
from tests.test_workshop_access import expand, largest_class, template

POLICY = ip.POLICY_FILE.read_text()


def shipped() -> dict:
    import json

    return json.loads(POLICY)


def docs_text() -> str:
    """The docs the commands come from, each run of whitespace one space (a command may wrap)."""
    return re.sub(r"\s+", " ", " ".join((REPO_ROOT / page).read_text() for page in ip.DOCS))


def test_the_file_is_current():
    assert POLICY == ip.render(ip.policy(template())), "run: python -m deploy.instructor_policy --write"


def test_the_check_sees_a_new_resource_type():
    """A template with a resource type it did not have gives another policy (the file is stale)."""
    grown = copy.deepcopy(template())
    grown["Resources"]["ClassLogs"] = {"Type": "AWS::Logs::LogGroup", "Properties": {}}
    assert "logs:CreateLogGroup" in actions_granted([ip.policy(grown)])
    assert ip.render(ip.policy(grown)) != POLICY


@pytest.mark.parametrize("seats", [3, 40])
def test_every_handler_permission_of_the_expanded_stack_is_allowed(seats):
    stack = largest_class() if seats == 40 else expand(seats)
    types = {r["Type"] for r in stack.resources.values()}
    assert {"AWS::EC2::Instance", "AWS::IAM::Role", "AWS::SSM::Parameter"} <= types
    granted = actions_granted([shipped()])
    for resource_type in types:
        missing = ip.handler_permissions(resource_type) - granted
        assert not missing, (resource_type, sorted(missing))
    # The types with no handlers are the ones the module says need nothing, and only those.
    assert {t for t in types if not ip.handler_permissions(t)} == set(ip.NO_HANDLERS)


def test_every_action_has_a_reason():
    """Nothing the stack and the docs do not need: each action is a handler permission of a type
    the template makes, one of the stack's own calls, or a command the docs show."""
    needed = set(ip.STACK_CALLS) | ip.docs_actions()
    for resource_type in ip.resource_types(template()):
        needed |= ip.handler_permissions(resource_type)
    assert actions_granted([shipped()]) == needed
    docs = docs_text()
    for command in ip.DOCS_COMMANDS:
        assert command in docs, f"{command!r} is in no page of {ip.DOCS}: drop it from DOCS_COMMANDS"


def test_every_aws_command_in_the_docs_is_sorted():
    """A command a page adds is the instructor's (its actions in the policy) or another's (None)."""
    shown = set(re.findall(r"\baws (?:[a-z0-9-]+) (?:[a-z0-9-]+)", docs_text()))
    assert "aws cloudformation create-stack" in shown
    assert shown - set(ip.DOCS_COMMANDS) == set(), "add each to DOCS_COMMANDS with what it calls"


def test_the_iam_calls_reach_only_the_stacks_own_roles():
    stack = expand(3)
    policy = [shipped()]
    lab_role = stack.get_att("Lab01Role", "Arn")
    learner_role = stack.get_att("Learner02Role", "Arn")
    profile = f"arn:aws:iam::{ACCOUNT}:instance-profile/{stack.ref('Lab01Profile')}"
    assert lab_role.startswith(f"arn:aws:iam::{ACCOUNT}:role/{STACK}/")
    ec2 = {"iam:PassedToService": "ec2.amazonaws.com"}
    for action, arn in (("iam:CreateRole", lab_role), ("iam:PutRolePolicy", learner_role),
                        ("iam:CreateInstanceProfile", profile), ("iam:AddRoleToInstanceProfile", profile),
                        ("sts:AssumeRole", learner_role)):
        assert allows(policy, Request(action, arn)), (action, arn)
    assert allows(policy, Request("iam:PassRole", lab_role, ec2))
    # Another role, another stack's, an admin role: refused; PassRole to another service: refused.
    for arn in (f"arn:aws:iam::{ACCOUNT}:role/admin", f"arn:aws:iam::{ACCOUNT}:role/{STACK}-x/r",
                f"arn:aws:iam::{ACCOUNT}:role/other/{STACK}-Lab01Role-A"):
        for action in ("iam:CreateRole", "iam:PutRolePolicy", "iam:AttachRolePolicy", "sts:AssumeRole"):
            assert not allows(policy, Request(action, arn)), (action, arn)
        assert not allows(policy, Request("iam:PassRole", arn, ec2)), arn
    assert not allows(policy, Request("iam:PassRole", lab_role, {"iam:PassedToService": "lambda.amazonaws.com"}))
    assert not allows(policy, Request("iam:CreateUser", f"arn:aws:iam::{ACCOUNT}:user/{STACK}/u"))


def test_another_stack_name_narrows_to_its_roles():
    other = ip.policy(template(), "my-class")
    role = f"arn:aws:iam::{ACCOUNT}:role/my-class/my-class-Lab01Role-A"
    assert allows([other], Request("iam:CreateRole", role))
    assert not allows([shipped()], Request("iam:CreateRole", role))


def test_it_fits_a_managed_policy():
    """IAM counts a managed policy's characters without whitespace: 6,144 at most."""
    assert len(re.sub(r"\s", "", POLICY)) <= 6144


def test_a_new_resource_type_without_handlers_must_say_why():
    """A type whose schema lists no handlers (a custom resource: a Lambda function runs it) is refused
    until NO_HANDLERS names what it needs."""
    with pytest.raises(ValueError, match="NO_HANDLERS"):
        ip.handler_permissions("AWS::CloudFormation::CustomResource")


def test_the_launch_command_takes_the_template_the_way_its_size_allows():
    """CloudFormation takes a template body of up to 51,200 bytes, one from S3 of up to 1 MB."""
    size = len(ip.TEMPLATE.read_bytes())
    assert size <= 1_000_000
    launch = docs_text().split("## Launch ", 1)[1].split("## ", 1)[0]
    assert "aws cloudformation create-stack" in launch
    if size > 51_200:
        assert "--template-body file" not in launch and re.search(r"--template-url \"?https://", launch)
        assert re.search(r"aws s3 cp deploy/workshop.yaml \"?s3://", launch)
