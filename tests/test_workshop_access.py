"""Who may do what in a class, seat by seat: deploy/workshop.yaml expanded for the smallest and the
largest class (tests/cfn_expand.py) and every learner role and lab role evaluated with AWS's
documented policy logic (tests/iam_policy.py). Learner N reaches lab N only (sessions, token,
start), only the instructor hands out seats, and lab N writes only its own token and reads none."""
from __future__ import annotations

import pytest

from deploy.template import load
from tests.cfn_expand import ACCOUNT, PARTITION, REGION, STACK, Stack
from tests.iam_policy import Request, actions_granted, allows, decide

INSTRUCTOR = f"arn:aws:iam::{ACCOUNT}:user/instructor"
SUBNETS = ["subnet-0a", "subnet-0b", "subnet-0c"]
CACHE = "s3://class-bucket/classroom-cache.tar.gz"
AGENT_ACTIONS = {
    "ssm:UpdateInstanceInformation", "ssmmessages:CreateControlChannel",
    "ssmmessages:CreateDataChannel", "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel", "ec2messages:AcknowledgeMessage", "ec2messages:DeleteMessage",
    "ec2messages:FailMessage", "ec2messages:GetEndpoint", "ec2messages:GetMessages",
    "ec2messages:SendReply"}
LEARNER_ACTIONS = {"ssm:StartSession", "ssmmessages:OpenDataChannel", "ssm:TerminateSession",
                   "ssm:ResumeSession", "ssm:GetParameter", "ec2:StartInstances"}
FORWARDING = f"arn:{PARTITION}:ssm:{REGION}::document/AWS-StartPortForwardingSession"


def expand(count: int, **parameters) -> Stack:
    return Stack(load(), {"LearnerCount": str(count), "InstructorArn": INSTRUCTOR,
                          "RepositoryUrl": "https://example.org/workbook.git",
                          "RepositoryCommit": "0123456789abcdef0123456789abcdef01234567",
                          "VpcId": "vpc-0a", "SubnetIds": SUBNETS, **parameters})


@pytest.fixture(scope="module", params=[1, 40], ids=["smallest-class", "largest-class"])
def stack(request) -> Stack:
    return expand(request.param, ClassroomCacheUrl=CACHE)


def seats(stack: Stack) -> list[str]:
    return sorted(k.removeprefix("Lab") for k in stack.of_type("AWS::EC2::Instance"))


def instance_arn(stack: Stack, seat: str) -> str:
    return f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{stack.ref('Lab' + seat)}"


def token(seat: str, stack_name: str = STACK) -> str:
    return f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/{stack_name}/lab{seat}/jupyter-token"


def policies(stack: Stack, role: str) -> list[dict]:
    properties = stack.resources[role]["Properties"]
    assert "ManagedPolicyArns" not in properties, f"{role} carries managed policies"
    return [p["PolicyDocument"] for p in properties["Policies"]]


def session_name(seat: str, stack_name: str = STACK) -> str:
    return f"{stack_name}-learner{seat}"


def learner(seat: str, stack_name: str = STACK) -> dict:
    """The request context of learner `seat`'s role session, as the instructor opened it."""
    return {"aws:userid": f"AROAEXAMPLEROLEID{seat}{stack_name}:{session_name(seat, stack_name)}"}


def session(seat: str, stack_name: str = STACK) -> str:
    # A Session Manager session id starts with the caller's name: the role session name here.
    return f"arn:aws:ssm:{REGION}:{ACCOUNT}:session/{session_name(seat, stack_name)}-0a1b2c3d4e5f6a7b8"


def on_session(action: str, seat: str, stack: Stack, caller: dict, stack_name: str = STACK) -> Request:
    """`action` on seat's session, with the tags Session Manager puts on it (the caller's
    role-id:session-name and the target instance) as the request's resource tags."""
    tags = {"ssm:resourceTag/aws:ssmmessages:session-id": learner(seat, stack_name)["aws:userid"],
            "ssm:resourceTag/aws:ssmmessages:target-id": stack.ref("Lab" + seat)}
    return Request(action, session(seat, stack_name=stack_name), {**caller, **tags})


def shell_without_a_document(policies_of_learner: list[dict], instance: str, caller: dict) -> bool:
    """`aws ssm start-session --target <lab>` naming no document opens SSM-SessionManagerRunShell
    even where no statement grants it, unless the StartSession statement carries the document
    check (AWS, "Enforce a session document permission check for the AWS CLI")."""
    if not allows(policies_of_learner, Request("ssm:StartSession", instance, caller)):
        return False
    checked = any(s.get("Condition", {}).get("BoolIfExists", {}).get("ssm:SessionDocumentAccessCheck") == "true"
                  for p in policies_of_learner for s in p["Statement"]
                  if s["Effect"] == "Allow" and "ssm:StartSession" in s["Action"])
    shell = f"arn:aws:ssm:{REGION}:{ACCOUNT}:document/SSM-SessionManagerRunShell"
    return not checked or allows(policies_of_learner, Request("ssm:StartSession", shell, caller))


def test_both_classes_have_their_seats():
    assert seats(expand(1)) == ["01"]
    assert seats(expand(40)) == [f"{n:02d}" for n in range(1, 41)]


def test_learner_n_opens_lab_n_and_no_other(stack):
    for seat in seats(stack):
        mine = policies(stack, f"Learner{seat}Role")
        assert actions_granted(mine) == LEARNER_ACTIONS
        for other in seats(stack):
            start = Request("ssm:StartSession", instance_arn(stack, other), learner(seat))
            assert allows(mine, start) == (seat == other), (seat, other)
            for action in ("ec2:StartInstances", "ec2:StopInstances", "ec2:TerminateInstances",
                           "ec2:RebootInstances", "ssm:SendCommand"):
                request = Request(action, instance_arn(stack, other), learner(seat))
                assert allows(mine, request) == (action == "ec2:StartInstances" and seat == other)
            reading = Request("ssm:GetParameter", token(other), learner(seat))
            assert allows(mine, reading) == (seat == other), (seat, other)
            for action in ("ssm:PutParameter", "ssm:GetParameters", "ssm:DeleteParameter"):
                assert not allows(mine, Request(action, token(other), learner(seat)))
            for action in ("ssm:TerminateSession", "ssm:ResumeSession", "ssmmessages:OpenDataChannel"):
                request = on_session(action, other, stack, learner(seat))
                assert allows(mine, request) == (seat == other), (action, seat, other)
        # The same seat of another class in the account: its sessions stay out of reach.
        for action in ("ssm:TerminateSession", "ssm:ResumeSession", "ssmmessages:OpenDataChannel"):
            request = on_session(action, seat, stack, learner(seat), stack_name="other-class")
            assert not allows(mine, request), (action, seat)


def test_learners_forward_ports_and_open_no_shell(stack):
    for seat in seats(stack):
        mine = policies(stack, f"Learner{seat}Role")
        assert allows(mine, Request("ssm:StartSession", FORWARDING, learner(seat)))
        for document in ("SSM-SessionManagerRunShell", "AWS-StartInteractiveCommand",
                         "AWS-StartSSHSession", "AWS-StartPortForwardingSessionToRemoteHost"):
            arn = f"arn:aws:ssm:{REGION}:{ACCOUNT}:document/{document}"
            assert not allows(mine, Request("ssm:StartSession", arn, learner(seat))), document
        # Naming no document would open a shell: the document check refuses it.
        assert not shell_without_a_document(mine, instance_arn(stack, seat), learner(seat))
        # The token of the same seat in another stack of the account stays out of reach.
        assert not allows(mine, Request("ssm:GetParameter", token(seat, "other-class"), learner(seat)))


def test_only_the_instructor_opens_a_seat_and_only_as_its_learner(stack):
    for seat in seats(stack):
        trust = [stack.resources[f"Learner{seat}Role"]["Properties"]["AssumeRolePolicyDocument"]]
        as_learner = {"sts:RoleSessionName": session_name(seat)}
        assert allows(trust, Request("sts:AssumeRole", "", as_learner, INSTRUCTOR), trust=True)
        assert not allows(trust, Request("sts:AssumeRole", "", {"sts:RoleSessionName": f"learner{seat}"},
                                         INSTRUCTOR), trust=True)
        assert not allows(trust, Request("sts:AssumeRole", "", as_learner,
                                         f"arn:aws:iam::{ACCOUNT}:user/someone"), trust=True)


def test_lab_n_writes_its_own_token_and_reads_none(stack):
    for seat in seats(stack):
        lab = policies(stack, f"Lab{seat}Role")
        assert actions_granted(lab) == AGENT_ACTIONS | {"ssm:PutParameter", "s3:GetObject"}
        for other in seats(stack):
            assert allows(lab, Request("ssm:PutParameter", token(other))) == (seat == other)
            for action in ("ssm:GetParameter", "ssm:GetParameters", "ssm:GetParametersByPath"):
                assert not allows(lab, Request(action, token(other)))
        assert allows(lab, Request("s3:GetObject", "arn:aws:s3:::class-bucket/classroom-cache.tar.gz"))
        assert not allows(lab, Request("s3:GetObject", "arn:aws:s3:::class-bucket/other"))
        trust = stack.resources[f"Lab{seat}Role"]["Properties"]["AssumeRolePolicyDocument"]
        assert trust["Statement"] == [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"},
                                       "Action": "sts:AssumeRole"}]
        profile = stack.resources[f"Lab{seat}Profile"]["Properties"]["Roles"]
        assert profile == [stack.ref(f"Lab{seat}Role")]
        instance = stack.resources[f"Lab{seat}"]["Properties"]
        assert instance["IamInstanceProfile"] == stack.ref(f"Lab{seat}Profile")


def test_without_an_archive_a_lab_reads_nothing_in_s3():
    stack = expand(2)
    lab = policies(stack, "Lab02Role")
    assert actions_granted(lab) == AGENT_ACTIONS | {"ssm:PutParameter"}
    assert not allows(lab, Request("s3:GetObject", "arn:aws:s3:::class-bucket/classroom-cache.tar.gz"))


@pytest.mark.parametrize("subnets", [SUBNETS[:1], SUBNETS, [f"subnet-{i}" for i in range(6)]])
def test_labs_spread_over_the_subnets_with_a_public_ipv4_address(subnets):
    stack = expand(40, SubnetIds=subnets)
    for seat in seats(stack):
        (interface,) = stack.resources[f"Lab{seat}"]["Properties"]["NetworkInterfaces"]
        assert interface["SubnetId"] == subnets[(int(seat) - 1) % len(subnets)], seat
        assert interface["AssociatePublicIpAddress"] == "true" and interface["DeviceIndex"] == "0"
        assert interface["GroupSet"] == [stack.ref("LabSecurityGroup")]
    private = expand(1, PublicIpv4="false")
    assert private.resources["Lab01"]["Properties"]["NetworkInterfaces"][0][
        "AssociatePublicIpAddress"] == "false"


def test_a_capacity_reservation_reaches_every_lab_through_the_launch_template():
    reserved = expand(3, CapacityReservationId="cr-0123456789abcdef0")
    data = reserved.resources["LabLaunchTemplate"]["Properties"]["LaunchTemplateData"]
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"}}
    for seat in seats(reserved):
        assert reserved.resources[f"Lab{seat}"]["Properties"]["LaunchTemplate"][
            "LaunchTemplateId"] == reserved.ref("LabLaunchTemplate")
    plain = expand(1).resources["LabLaunchTemplate"]["Properties"]["LaunchTemplateData"]
    assert plain["CapacityReservationSpecification"] == {"CapacityReservationPreference": "open"}


def each_member_in(rule: dict, parameters: dict, subnet_vpc: dict) -> bool:
    """The template's subnet rule as CloudFormation evaluates it: Fn::ValueOfAll of the subnets'
    VpcId, each a member of Fn::RefAll of the VPC id parameters."""
    (assertion,) = rule["Assertions"]
    values_of, ref_all = assertion["Assert"]["Fn::EachMemberIn"]
    assert values_of == {"Fn::ValueOfAll": ["AWS::EC2::Subnet::Id", "VpcId"]}
    assert ref_all == {"Fn::RefAll": "AWS::EC2::VPC::Id"}
    return all(subnet_vpc[s] in [parameters["VpcId"]] for s in parameters["SubnetIds"])


def test_a_subnet_outside_the_vpc_is_refused_by_the_templates_rule():
    template = load()
    rule = template["Rules"]["SubnetsInTheVpc"]
    types = {p["Type"] for p in template["Parameters"].values()}
    assert {"AWS::EC2::VPC::Id", "List<AWS::EC2::Subnet::Id>"} <= types
    where = {"subnet-0a": "vpc-0a", "subnet-0b": "vpc-0a", "subnet-9z": "vpc-other"}
    assert each_member_in(rule, {"VpcId": "vpc-0a", "SubnetIds": ["subnet-0a", "subnet-0b"]}, where)
    assert not each_member_in(rule, {"VpcId": "vpc-0a", "SubnetIds": ["subnet-0a", "subnet-9z"]},
                              where)


def test_each_lab_has_a_wait_condition_its_user_data_signals(stack):
    for seat in seats(stack):
        ready = stack.resources[f"Lab{seat}Ready"]
        assert ready["Type"] == "AWS::CloudFormation::WaitCondition"
        assert ready["Properties"] == {"Handle": stack.ref(f"Lab{seat}Signal"), "Timeout": "2700",
                                       "Count": 1}
        lab = stack.resources[f"Lab{seat}"]
        assert "CreationPolicy" not in lab
        header = lab["Properties"]["UserData"]["Fn::Base64"] if isinstance(
            lab["Properties"]["UserData"], dict) else lab["Properties"]["UserData"]
        assert f"export LAB_SIGNAL_URL='{stack.ref(f'Lab{seat}Signal')}'" in header
        assert f"LAB_TOKEN_PARAMETER='/{STACK}/lab{seat}/jupyter-token'" in header


def test_the_largest_class_fits_cloudformations_quotas():
    stack = expand(40)
    assert len(stack.raw_resources) <= 500 and len(stack.outputs) <= 200


def test_the_evaluator_refuses_what_a_broader_policy_would_allow():
    """The model is not a yes-machine: the old policy (every tagged lab, every token) lets learner
    01 into lab 02, and an explicit Deny wins over any Allow."""
    broad = [{"Statement": [
        {"Effect": "Allow", "Action": "ssm:StartSession", "Resource": "arn:aws:ec2:*:*:instance/*"},
        {"Effect": "Allow", "Action": "ssm:GetParameter",
         "Resource": f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/{STACK}/lab*/jupyter-token"}]}]
    stack = expand(2)
    assert allows(broad, Request("ssm:StartSession", instance_arn(stack, "02"), learner("01")))
    assert allows(broad, Request("ssm:GetParameter", token("02"), learner("01")))
    denied = broad + [{"Statement": {"Effect": "Deny", "Action": "ssm:*", "Resource": "*"}}]
    assert decide(denied, Request("ssm:GetParameter", token("02"))) == "ExplicitDeny"
    own = [{"Statement": {"Effect": "Allow", "Action": "ssm:TerminateSession",
                          "Resource": "arn:aws:ssm:*:*:session/${aws:username}-*"}}]
    # Without the document check, a start-session naming no document is a shell.
    unchecked = [{"Statement": [{"Effect": "Allow", "Action": "ssm:StartSession",
                                 "Resource": [instance_arn(stack, "01"), FORWARDING]}]}]
    assert shell_without_a_document(unchecked, instance_arn(stack, "01"), learner("01"))
    # A role session has no aws:username: the variable makes the resource match nothing.
    assert not allows(own, Request("ssm:TerminateSession", session("01"), learner("01")))
    assert allows(own, Request("ssm:TerminateSession", session("01"), {"aws:username": session_name("01")}))
