"""Who may do what in a class, seat by seat: deploy/workshop.yaml expanded for a class of one and
of three (tests/cfn_expand.py) and every learner role and lab role evaluated with AWS's
documented policy logic (tests/iam_policy.py, which refuses what it does not model). Learner N
reaches lab N only (sessions, token, start), only the instructor hands out seats, lab N reads and
writes only its own token, and its credentials work only from the lab itself.

Every policy that reaches a role is read, in whatever resource or property it is written
(tests/cfn_expand.py, role_policies: a form it does not read fails the check). Every probe is
decided twice, with its minimal request context and with the context a signed request really
carries (realistic(): the global keys AWS adds to every call, filled in for the caller), and the two
verdicts must agree: an Allow conditioned on aws:SecureTransport, aws:RequestedRegion,
aws:PrincipalAccount or aws:PrincipalArn shows up either way. Every trust policy is probed with
every role ARN the stack makes (path and name as the expansion writes them) and outsiders.

The check_* functions raise AssertionError (or PolicyNotModelled) on a stack that breaks them;
tests/test_workshop_stack_mutants.py runs them on templates with a path from one seat to another
seeded in, and shows each one caught."""
from __future__ import annotations

import copy
import functools
import re

import pytest

from deploy.template import LABS_LOOP, load
from tests.cfn_expand import ACCOUNT, PARTITION, REGION, STACK, Stack, role_policies
from tests.iam_policy import Request, actions_granted, allows, decide

INSTRUCTOR = f"arn:aws:iam::{ACCOUNT}:user/instructor"
VPC, SUBNETS, ROUTE_TABLES = "vpc-0a", ["subnet-0a", "subnet-0b", "subnet-0c"], ["rtb-0a1b2c3d"]
CACHE = "s3://class-bucket/classroom-cache.tar.gz"
BUNDLE = "s3://class-bucket/class-bundle.tar.gz"
AGENT_ACTIONS = {
    "ssm:UpdateInstanceInformation", "ssmmessages:CreateControlChannel",
    "ssmmessages:CreateDataChannel", "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel", "ec2messages:AcknowledgeMessage", "ec2messages:DeleteMessage",
    "ec2messages:FailMessage", "ec2messages:GetEndpoint", "ec2messages:GetMessages",
    "ec2messages:SendReply"}
# The agent's association poll (amazon-ssm-agent: every DefaultSsmAssociationFrequencyMinutes,
# 10): ListInstanceAssociations names the instance, its fallback ListAssociations nothing.
ASSOCIATION_ACTIONS = {"ssm:ListInstanceAssociations", "ssm:ListAssociations"}
LAB_ACTIONS = AGENT_ACTIONS | ASSOCIATION_ACTIONS | {"ssm:PutParameter", "ssm:GetParameter"}
LEARNER_ACTIONS = {"ssm:StartSession", "ssmmessages:OpenDataChannel", "ssm:TerminateSession",
                   "ssm:ResumeSession", "ssm:GetParameter", "ec2:StartInstances"}
FORWARDING = f"arn:{PARTITION}:ssm:{REGION}::document/AWS-StartPortForwardingSession"
# Stacks a learner's own class may share the account with: another class, and names that begin
# with this stack's name (the old "<stack>-learnerNN-*" prefix matched the second).
OTHER_STACKS = ("other-class", f"{STACK}-learner01-x", f"{STACK}-x")


@functools.lru_cache(maxsize=1)
def template() -> dict:
    """The template as read once (each Stack works on its own copy)."""
    return load()


def expand(count: int, **parameters) -> Stack:
    return Stack(template(), {"LearnerCount": str(count), "InstructorArn": INSTRUCTOR,
                          "InstructorEmail": "instructor@example.org",
                          "RepositoryUrl": "https://example.org/workbook.git",
                          "RepositoryCommit": "0123456789abcdef0123456789abcdef01234567",
                          "VpcId": VPC, "SubnetIds": SUBNETS, "RouteTableIds": ROUTE_TABLES,
                          **parameters})


@functools.lru_cache(maxsize=1)
def largest_class() -> Stack:
    """A class of 40 with a cache archive, expanded once (several tests read it; none changes it)."""
    return expand(40, ClassroomCacheUrl=CACHE)


# Every seat against every lab in a class of 1 and of 3; the class of 40 is seat 01's policies with
# the seat replaced, seat by seat (tests/test_workshop_stack_seats.py), so what holds for 3 holds.
@pytest.fixture(scope="module", params=[1, 3], ids=["one-seat", "three-seats"])
def stack(request) -> Stack:
    return expand(request.param, ClassroomCacheUrl=CACHE)


def seats(stack: Stack) -> list[str]:
    return sorted(k.removeprefix("Lab") for k in stack.of_type("AWS::EC2::Instance"))


def instance_arn(stack: Stack, seat: str) -> str:
    return f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{stack.ref('Lab' + seat)}"


def token(seat: str, stack_name: str = STACK) -> str:
    return f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/{stack_name}/lab{seat}/jupyter-token"


@functools.lru_cache(maxsize=8)
def reaching(stack: Stack) -> dict[str, dict[str, dict]]:
    """Every policy that reaches each role (role_policies), read once per expanded stack."""
    return role_policies(stack)


def policies(stack: Stack, role: str) -> list[dict]:
    """Every identity policy that reaches `role`: inline, managed, or attached by another resource."""
    return [document for name, document in reaching(stack)[role].items() if name != "trust"]


def trust_policy(stack: Stack, role: str) -> list[dict]:
    return [reaching(stack)[role]["trust"]]


LAPTOP_IP = "198.51.100.7"  # a learner's laptop, or wherever credentials were carried off to


def lab_ip(seat: str) -> str:
    """Lab `seat`'s primary private IPv4 address (made up, one per seat)."""
    return f"10.0.{int(seat)}.10"


def realistic(stack: Stack, request: Request) -> dict:
    """The request context AWS builds for a signed call (IAM User Guide, "AWS global condition
    context keys": the keys "always present" and those a role session, EC2 role credentials or a
    VPC endpoint add), for the caller that `request`'s minimal context or principal names, with
    the minimal context's own values kept."""
    minimal = request.context
    signed = {"aws:SecureTransport": "true", "aws:RequestedRegion": REGION,
              "aws:PrincipalAccount": ACCOUNT, "aws:CurrentTime": "2026-11-30T09:00:00Z",
              "aws:EpochTime": "1796029200", "aws:UserAgent": "aws-cli/2.22.0 Python/3.12.6",
              "aws:ViaAWSService": "false", "aws:PrincipalIsAWSService": "false",
              "aws:ResourceAccount": ACCOUNT}
    userid = str(minimal.get("aws:userid", ""))
    if request.principal is not None:  # a trust policy: the caller assuming the role
        caller = request.principal
        if caller.endswith(".amazonaws.com"):
            signed.update({"aws:PrincipalIsAWSService": "true", "aws:PrincipalServiceName": caller})
            for key in ("aws:PrincipalAccount", "aws:UserAgent", "aws:ResourceAccount"):
                signed.pop(key)
        elif ":user/" in caller:
            signed.update({"aws:PrincipalArn": caller, "aws:PrincipalType": "User",
                           "aws:userid": "AIDAEXAMPLEUSERID", "aws:username": caller.rsplit("/", 1)[1],
                           "aws:SourceIp": LAPTOP_IP})
        else:
            signed.update({"aws:PrincipalArn": caller, "aws:PrincipalType": "AssumedRole",
                           "aws:userid": "AROAEXAMPLEROLEID:session", "aws:SourceIp": LAPTOP_IP,
                           "aws:MultiFactorAuthPresent": "false",
                           "aws:TokenIssueTime": "2026-11-30T08:00:00Z"})
            if caller.split(":")[4] != ACCOUNT:
                signed["aws:PrincipalAccount"] = caller.split(":")[4]
    elif "ec2:SourceInstanceARN" in minimal:  # a lab's role credentials
        instance = str(minimal["ec2:SourceInstanceARN"]).rsplit("/", 1)[1]
        (seat,) = [s for s in seats(stack) if stack.ref("Lab" + s) == instance]
        signed.update({"aws:PrincipalArn": stack.get_att(f"Lab{seat}Role", "Arn"),
                       "aws:PrincipalType": "AssumedRole", "aws:userid": f"AROAEXAMPLELAB{seat}:{instance}",
                       "aws:MultiFactorAuthPresent": "false", "aws:TokenIssueTime": "2026-11-30T08:00:00Z",
                       "aws:Ec2InstanceSourcePrivateIPv4": lab_ip(seat)})
        if "aws:SourceVpc" in minimal:  # through an endpoint: no public source address
            signed["aws:SourceVpce"] = "vpce-0a1b2c3d4e5f6a7b8"
        else:
            signed["aws:SourceIp"] = LAPTOP_IP
    elif ":" in userid:  # a learner's role session
        session_name_ = userid.split(":", 1)[1]
        seat = session_name_.rsplit("learner", 1)[1]
        signed.update({"aws:PrincipalArn": stack.get_att(f"Learner{seat}Role", "Arn"),
                       "aws:PrincipalType": "AssumedRole", "aws:SourceIp": LAPTOP_IP,
                       "aws:MultiFactorAuthPresent": "false",
                       "aws:TokenIssueTime": "2026-11-30T08:00:00Z"})
    return {**signed, **minimal}


def verdict(stack: Stack, policies_: list[dict], request: Request, trust: bool = False) -> str:
    """decide() under the minimal and the realistic context; they must agree."""
    minimal = decide(policies_, request, trust)
    signed = decide(policies_, Request(request.action, request.resource, realistic(stack, request),
                                       request.principal), trust)
    assert minimal == signed, (f"{request.action} on {request.resource}: {minimal} with the minimal "
                               f"context, {signed} with the keys every signed request carries")
    return signed


def allowed(stack: Stack, policies_: list[dict], request: Request, trust: bool = False) -> bool:
    return verdict(stack, policies_, request, trust) == "Allow"


def session_name(seat: str, stack_name: str = STACK) -> str:
    return f"{stack_name}.learner{seat}"


def learner(seat: str, stack_name: str = STACK) -> dict:
    """The request context of learner `seat`'s role session, as the instructor opened it."""
    return {"aws:userid": f"AROAEXAMPLEROLEID{seat}{stack_name}:{session_name(seat, stack_name)}"}


def session(seat: str, stack_name: str = STACK) -> str:
    # A role session's Session Manager session id: its role session name, a dash, an id.
    return f"arn:aws:ssm:{REGION}:{ACCOUNT}:session/{session_name(seat, stack_name)}-0a1b2c3d4e5f6a7b8"


def seat_tags(stack: Stack, seat: str, prefixes=("aws:ResourceTag", "ssm:resourceTag",
                                                 "ec2:ResourceTag")) -> dict:
    """The tags a lab's instance and token carry, as the request context's resource-tag keys."""
    tags = {"workshop-seat": seat, "workshop-stack": STACK, "Name": f"{STACK}-lab{seat}"}
    return {f"{prefix}/{k}": v for prefix in prefixes for k, v in tags.items()}


def on_session(action: str, seat: str, stack: Stack, caller: dict, stack_name: str = STACK,
               tagged: bool = True) -> Request:
    """`action` on seat's session, with (or without) the tags Session Manager puts on it (the
    caller's role-id:session-name and the target instance) as the request's resource tags."""
    tags = {"ssm:resourceTag/aws:ssmmessages:session-id": learner(seat, stack_name)["aws:userid"],
            "ssm:resourceTag/aws:ssmmessages:target-id": stack.ref("Lab" + seat)} if tagged else {}
    return Request(action, session(seat, stack_name=stack_name), {**caller, **tags})


def shell_without_a_document(policies_of_learner: list[dict], instance: str, caller: dict,
                             stack: Stack | None = None) -> bool:
    """`aws ssm start-session --target <lab>` naming no document opens SSM-SessionManagerRunShell
    even where no statement grants it, unless the StartSession statement carries the document
    check (AWS, "Enforce a session document permission check for the AWS CLI"). With `stack`, each
    probe is decided under both contexts (verdict)."""
    def allows(policies_, request):  # noqa: F811 - the module's, or both contexts'
        return allowed(stack, policies_, request) if stack else decide(policies_, request) == "Allow"
    if not allows(policies_of_learner, Request("ssm:StartSession", instance, caller)):
        return False
    checked = any(s.get("Condition", {}).get("BoolIfExists", {}).get("ssm:SessionDocumentAccessCheck") == "true"
                  for p in policies_of_learner for s in p["Statement"]
                  if s["Effect"] == "Allow" and "ssm:StartSession" in s["Action"])
    shell = f"arn:aws:ssm:{REGION}:{ACCOUNT}:document/SSM-SessionManagerRunShell"
    return not checked or allows(policies_of_learner, Request("ssm:StartSession", shell, caller))


def lab_caller(stack: Stack, seat: str, source_vpc: str | None = VPC, via_service: bool = False,
               source_ip: str | None = None) -> dict:
    """The request context of lab `seat`'s role credentials (EC2 role credentials carry
    ec2:SourceInstanceARN, aws:Ec2InstanceSourceVpc and aws:Ec2InstanceSourcePrivateIPv4), called
    through `source_vpc`'s endpoints from `source_ip` (the lab's own address unless given; an
    endpoint puts both in aws:SourceVpc and aws:VpcSourceIp) or, with None, from anywhere else
    (both keys are present only through a VPC endpoint)."""
    context = {"ec2:SourceInstanceARN": instance_arn(stack, seat), "aws:Ec2InstanceSourceVpc": VPC,
               "aws:Ec2InstanceSourcePrivateIPv4": lab_ip(seat),
               "aws:ViaAWSService": "true" if via_service else "false"}
    if source_vpc is not None:
        context["aws:SourceVpc"] = source_vpc
        context["aws:VpcSourceIp"] = source_ip or lab_ip(seat)
    return context


# What a learner might try on another seat's lab, beyond the actions granted.
ON_AN_INSTANCE = ("ssm:StartSession", "ec2:StartInstances", "ec2:StopInstances",
                  "ec2:TerminateInstances", "ec2:RebootInstances", "ec2:ModifyInstanceAttribute",
                  "ssm:SendCommand", "ec2:GetConsoleOutput")
ON_A_TOKEN = ("ssm:GetParameter", "ssm:GetParameters", "ssm:GetParameterHistory",
              "ssm:PutParameter", "ssm:DeleteParameter", "ssm:LabelParameterVersion")
ON_A_SESSION = ("ssm:TerminateSession", "ssm:ResumeSession", "ssmmessages:OpenDataChannel")
UNNAMED = ("ssm:DescribeSessions", "ssm:DescribeParameters", "ec2:DescribeInstances",
           "ssm:DescribeInstanceInformation")


def parameter_paths(seat: str, stack_name: str = STACK) -> list[str]:
    """GetParametersByPath's resources: the path's own ARN, down to the root."""
    base = f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter"
    return [f"{base}/{stack_name}/lab{seat}", f"{base}/{stack_name}", f"{base}/"]


def check_learners_reach_only_their_own_lab(stack: Stack) -> None:
    for seat in seats(stack):
        mine = policies(stack, f"Learner{seat}Role")
        assert actions_granted(mine) == LEARNER_ACTIONS
        caller = learner(seat)
        for other in seats(stack):
            own = seat == other
            for tags in ({}, seat_tags(stack, other), seat_tags(stack, seat)):
                context = {**caller, **tags}
                for action in ON_AN_INSTANCE:
                    request = Request(action, instance_arn(stack, other), context)
                    expected = own and action in ("ssm:StartSession", "ec2:StartInstances")
                    assert allowed(stack, mine, request) == expected, (action, seat, other, tags)
                for action in ON_A_TOKEN:
                    request = Request(action, token(other), context)
                    assert allowed(stack, mine, request) == (own and action == "ssm:GetParameter"), (
                        action, seat, other, tags)
                for path in parameter_paths(other):
                    assert not allowed(stack, mine, Request("ssm:GetParametersByPath", path, context)), path
            for action in ON_A_SESSION:
                assert allowed(stack, mine, on_session(action, other, stack, caller)) == own, (action, seat, other)
                untagged = on_session(action, other, stack, caller, tagged=False)
                assert not allowed(stack, mine, untagged) or (own and action == "ssmmessages:OpenDataChannel")
        for action in UNNAMED:
            assert not allowed(stack, mine, Request(action, "*", caller)), action
        # The same seat of another class in the account, or of a stack whose name begins with
        # this one's: its sessions and token stay out of reach.
        for stack_name in OTHER_STACKS:
            for action in ON_A_SESSION:
                request = on_session(action, seat, stack, caller, stack_name=stack_name)
                assert not allowed(stack, mine, request), (action, seat, stack_name)
            assert not allowed(stack, mine, Request("ssm:GetParameter", token(seat, stack_name), caller))


def check_learners_forward_ports_and_open_no_shell(stack: Stack) -> None:
    for seat in seats(stack):
        mine = policies(stack, f"Learner{seat}Role")
        assert allowed(stack, mine, Request("ssm:StartSession", FORWARDING, learner(seat)))
        for document in ("SSM-SessionManagerRunShell", "AWS-StartInteractiveCommand",
                         "AWS-StartSSHSession", "AWS-StartPortForwardingSessionToRemoteHost"):
            arn = f"arn:aws:ssm:{REGION}:{ACCOUNT}:document/{document}"
            assert not allowed(stack, mine, Request("ssm:StartSession", arn, learner(seat))), document
        # Naming no document would open a shell: the document check refuses it.
        assert not shell_without_a_document(mine, instance_arn(stack, seat), learner(seat), stack)


# Principals outside the class: another user, the account's root, another account's instructor, a
# made-up role ARN of the old probe, and services.
OUTSIDERS = (f"arn:aws:iam::{ACCOUNT}:user/someone", f"arn:aws:iam::{ACCOUNT}:root",
             "arn:aws:iam::444455556666:user/instructor", f"arn:aws:iam::{ACCOUNT}:role/{STACK}/Learner01Role",
             "ssm.amazonaws.com", "lambda.amazonaws.com")


def check_every_trust_policy_admits_only_its_principal(stack: Stack) -> None:
    """Each role the stack makes may be assumed by its one principal only: learner role NN by the
    instructor as <stack>.learnerNN, lab role NN by EC2. Probed with every role ARN of the stack,
    as the expansion writes it (path and generated name), the instructor and outsiders, under
    every seat's session name and others."""
    roles = sorted(stack.of_type("AWS::IAM::Role"))
    assert set(roles) == {f"{kind}{seat}Role" for seat in seats(stack) for kind in ("Lab", "Learner")}
    callers = [INSTRUCTOR, "ec2.amazonaws.com", *(stack.get_att(r, "Arn") for r in roles), *OUTSIDERS]
    names = [session_name(seat) for seat in seats(stack)] + [
        "learner01", f"{STACK}-learner01", session_name("01", "other-class"), "i-0123456789abcdef0"]
    for role in roles:
        trust = trust_policy(stack, role)
        seat = role.removeprefix("Lab").removeprefix("Learner").removesuffix("Role")
        for caller in callers:
            for name in names:
                request = Request("sts:AssumeRole", stack.get_att(role, "Arn"),
                                  {"sts:RoleSessionName": name}, caller)
                expected = (caller == "ec2.amazonaws.com") if role.startswith("Lab") else (
                    caller == INSTRUCTOR and name == session_name(seat))
                assert allowed(stack, trust, request, trust=True) == expected, (role, caller, name)


def agent_schedule(stack: Stack, seat: str) -> list[Request]:
    """Every call the Systems Manager agent on lab `seat` makes on its own schedule, whatever the
    learners do (amazon-ssm-agent: UpdateInstanceInformation every DefaultSsmHealthFrequencyMinutes,
    5; the association poll every DefaultSsmAssociationFrequencyMinutes, 10, ListInstanceAssociations
    on its own instance and ListAssociations as the fallback; the message and control channels it
    keeps open), from the lab through the endpoints."""
    at_home = lab_caller(stack, seat)
    calls = [Request(action, "*", at_home) for action in sorted(AGENT_ACTIONS)]
    calls.append(Request("ssm:ListInstanceAssociations", instance_arn(stack, seat),
                         {**at_home, **seat_tags(stack, seat)}))
    calls.append(Request("ssm:ListAssociations", "*", at_home))
    return calls


def check_labs_write_only_their_own_token_from_their_vpc(stack: Stack) -> None:
    for seat in seats(stack):
        lab = policies(stack, f"Lab{seat}Role")
        assert actions_granted(lab) <= LAB_ACTIONS | {"s3:GetObject"}
        at_home = lab_caller(stack, seat)
        for other in seats(stack):
            own = seat == other
            for tags in ({}, seat_tags(stack, other)):
                context = {**at_home, **tags}
                for action in ON_A_TOKEN:  # its own token: read and write; no other, nor delete
                    expected = own and action in ("ssm:GetParameter", "ssm:PutParameter")
                    assert allowed(stack, lab, Request(action, token(other), context)) == expected, action
                for path in parameter_paths(other):
                    assert not allowed(stack, lab, Request("ssm:GetParametersByPath", path, context))
                for action in ON_AN_INSTANCE:
                    assert not allowed(stack, lab, Request(action, instance_arn(stack, other), context)), action
                # The association poll names its own instance, known by its tags.
                listing = Request("ssm:ListInstanceAssociations", instance_arn(stack, other), context)
                assert allowed(stack, lab, listing) == (own and bool(tags)), (seat, other, tags)
            for action in ON_A_SESSION[:2]:
                assert not allowed(stack, lab, on_session(action, other, stack, at_home)), action
        for action in UNNAMED:
            assert not allowed(stack, lab, Request(action, "*", at_home)), action
        # The agent's own calls and the token work from the lab, and are refused anywhere else:
        # off the lab's VPC (no aws:SourceVpc), through another VPC's endpoints, and from another
        # host of the lab's VPC, a neighbour's lab among them (aws:VpcSourceIp).
        for call in agent_schedule(stack, seat):
            assert allowed(stack, lab, call), call.action
        others = [lab_ip(s) for s in seats(stack) if s != seat] + ["10.0.200.9"]
        elsewhere = [lab_caller(stack, seat, None), lab_caller(stack, seat, "vpc-attacker"),
                     *(lab_caller(stack, seat, VPC, source_ip=ip) for ip in others)]
        for context in elsewhere:
            assert verdict(stack, lab, Request("ssm:PutParameter", token(seat), context)) == "ExplicitDeny"
            for call in agent_schedule(stack, seat):
                tags = {k: v for k, v in call.context.items() if "Tag/" in k}  # the call's resource's
                moved = Request(call.action, call.resource, {**context, **tags})
                assert verdict(stack, lab, moved) == "ExplicitDeny", (call.action, context)
        # A service acting for the lab (SSM calling KMS for the parameter) is not refused here.
        via = lab_caller(stack, seat, None, via_service=True)
        assert verdict(stack, lab, Request("kms:Decrypt", "*", via)) == "ImplicitDeny"


ALL_CHECKS = (check_learners_reach_only_their_own_lab, check_learners_forward_ports_and_open_no_shell,
              check_every_trust_policy_admits_only_its_principal,
              check_labs_write_only_their_own_token_from_their_vpc)


def test_both_classes_have_their_seats():
    assert seats(expand(1)) == ["01"]
    assert seats(largest_class()) == [f"{n:02d}" for n in range(1, 41)]


def test_learner_n_reaches_lab_n_and_no_other(stack):
    check_learners_reach_only_their_own_lab(stack)


def test_learners_forward_ports_and_open_no_shell(stack):
    check_learners_forward_ports_and_open_no_shell(stack)


def test_every_role_is_assumed_by_its_one_principal_only(stack):
    check_every_trust_policy_admits_only_its_principal(stack)


def test_lab_n_reads_and_writes_only_its_own_token_and_only_from_the_lab(stack):
    check_labs_write_only_their_own_token_from_their_vpc(stack)
    for seat in seats(stack):
        lab = policies(stack, f"Lab{seat}Role")
        assert allowed(stack, lab, Request("s3:GetObject", "arn:aws:s3:::class-bucket/classroom-cache.tar.gz",
                                           lab_caller(stack, seat)))
        assert not allowed(stack, lab, Request("s3:GetObject", "arn:aws:s3:::class-bucket/other",
                                               lab_caller(stack, seat)))
        trust = stack.resources[f"Lab{seat}Role"]["Properties"]["AssumeRolePolicyDocument"]
        assert trust["Statement"] == [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"},
                                       "Action": "sts:AssumeRole"}]
        profile = stack.resources[f"Lab{seat}Profile"]["Properties"]["Roles"]
        assert profile == [stack.ref(f"Lab{seat}Role")]
        instance = stack.resources[f"Lab{seat}"]["Properties"]
        assert instance["IamInstanceProfile"] == stack.ref(f"Lab{seat}Profile")


def test_with_a_class_bundle_lab_n_reads_that_object_and_no_other_and_needs_no_repository():
    stack = expand(2, BundleUrl=BUNDLE, RepositoryUrl="")
    for seat in seats(stack):
        lab = policies(stack, f"Lab{seat}Role")
        assert actions_granted(lab) == LAB_ACTIONS | {"s3:GetObject"}
        for key, readable in (("class-bundle.tar.gz", True), ("classroom-cache.tar.gz", False),
                              ("class-bundle.tar.gz.old", False), ("other", False)):
            request = Request("s3:GetObject", f"arn:aws:s3:::class-bucket/{key}", lab_caller(stack, seat))
            assert allowed(stack, lab, request) == readable, (seat, key)
        header = stack.resources[f"Lab{seat}"]["Properties"]["UserData"]
        assert f"LAB_BUNDLE='{BUNDLE}'" in header and "LAB_REPOSITORY_URL=''" in header


def test_without_an_archive_a_lab_reads_nothing_in_s3():
    stack = expand(2)
    lab = policies(stack, "Lab02Role")
    assert actions_granted(lab) == LAB_ACTIONS
    assert not allows(lab, Request("s3:GetObject", "arn:aws:s3:::class-bucket/classroom-cache.tar.gz",
                                   lab_caller(stack, "02")))


@pytest.mark.parametrize("subnets", [SUBNETS[:1], SUBNETS, [f"subnet-{i}" for i in range(6)]])
def test_labs_spread_over_the_subnets_with_no_public_address_unless_asked(subnets):
    stack = expand(7, SubnetIds=subnets)  # seven seats: the seventh wraps around six subnets
    for seat in seats(stack):
        (interface,) = stack.resources[f"Lab{seat}"]["Properties"]["NetworkInterfaces"]
        assert interface["SubnetId"] == subnets[(int(seat) - 1) % len(subnets)], seat
        # The resolved value (checkov's public-IP check reads only a boolean true).
        assert interface["AssociatePublicIpAddress"] == "false" and interface["DeviceIndex"] == "0"
        assert interface["GroupSet"] == [stack.ref("LabSecurityGroup")]
    public = expand(1, PublicIpv4="true")
    assert public.resources["Lab01"]["Properties"]["NetworkInterfaces"][0][
        "AssociatePublicIpAddress"] == "true"


def test_the_labs_reach_systems_manager_and_s3_through_the_stacks_endpoints():
    stack = expand(2)
    endpoints = {r["Properties"]["ServiceName"]: r["Properties"]
                 for r in stack.of_type("AWS::EC2::VPCEndpoint").values()}
    assert set(endpoints) == {f"com.amazonaws.{REGION}.{s}" for s in
                              ("ssm", "ssmmessages", "ec2messages", "s3")}
    for service in ("ssm", "ssmmessages", "ec2messages"):
        endpoint = endpoints[f"com.amazonaws.{REGION}.{service}"]
        assert endpoint == {"VpcEndpointType": "Interface", "ServiceName": endpoint["ServiceName"],
                            "VpcId": VPC, "SubnetIds": SUBNETS, "PrivateDnsEnabled": True,
                            "SecurityGroupIds": [stack.ref("EndpointSecurityGroup")]}
    assert endpoints[f"com.amazonaws.{REGION}.s3"] == {
        "VpcEndpointType": "Gateway", "ServiceName": f"com.amazonaws.{REGION}.s3", "VpcId": VPC,
        "RouteTableIds": ROUTE_TABLES}
    group = stack.resources["EndpointSecurityGroup"]["Properties"]
    (inbound,) = group["SecurityGroupIngress"]
    assert inbound["SourceSecurityGroupId"] == stack.ref("LabSecurityGroup")
    assert (inbound["IpProtocol"], inbound["FromPort"], inbound["ToPort"]) == ("tcp", 443, 443)
    assert "CidrIp" not in inbound and "CidrIpv6" not in inbound


def test_each_token_parameter_is_the_stacks_own_tagged_and_the_one_its_lab_writes(stack):
    for seat in seats(stack):
        parameter = stack.resources[f"Lab{seat}Token"]
        assert parameter["Type"] == "AWS::SSM::Parameter" and "DeletionPolicy" not in parameter
        assert parameter["Properties"]["Name"] == f"/{STACK}/lab{seat}/jupyter-token"
        assert parameter["Properties"]["Tags"] == {"workshop-stack": STACK, "workshop-seat": seat}
        header = stack.resources[f"Lab{seat}"]["Properties"]["UserData"]  # Fn::Base64 kept as text
        assert f"LAB_TOKEN_PARAMETER='/{STACK}/lab{seat}/jupyter-token'" in header
        assert allows(policies(stack, f"Lab{seat}Role"), Request(
            "ssm:PutParameter", token(seat), lab_caller(stack, seat)))


def test_session_manager_preferences_end_idle_and_long_sessions():
    stack = expand(1, SessionIdleMinutes="15", SessionMaxMinutes="180")
    document = stack.resources["SessionPreferences"]["Properties"]
    assert (document["Name"], document["DocumentType"]) == ("SSM-SessionManagerRunShell", "Session")
    content = document["Content"]
    assert content["sessionType"] == "Standard_Stream"
    assert (content["inputs"]["idleSessionTimeout"], content["inputs"]["maxSessionDuration"]) == ("15", "180")
    assert "SessionPreferences" not in expand(1, SetSessionPreferences="false").resources


def event_matches(pattern, event) -> bool:
    """EventBridge's matching, for the parts the rule uses: nested fields, a list of values (any),
    exact strings, {"prefix": ...} and {"wildcard": ...}; anything else raises."""
    if isinstance(pattern, dict):
        return all(key in event and event_matches(value, event[key]) for key, value in pattern.items())
    for option in pattern:
        if isinstance(option, str):
            matched = event == option
        elif set(option) == {"prefix"}:
            matched = isinstance(event, str) and event.startswith(option["prefix"])
        elif set(option) == {"wildcard"}:
            from fnmatch import fnmatchcase
            matched = isinstance(event, str) and fnmatchcase(event, option["wildcard"])
        else:
            raise NotImplementedError(f"event pattern {option!r} is not modelled")
        if matched:
            return True
    return False


def cloudtrail_event(role_arn: str, error: str | None, event_name: str = "GetParameter") -> dict:
    detail = {"eventName": event_name,
              "userIdentity": {"type": "AssumedRole", "sessionContext": {"sessionIssuer": {
                  "type": "Role", "arn": role_arn}}}}
    if error:
        detail["errorCode"] = error
    return {"detail-type": "AWS API Call via CloudTrail", "source": "aws.ssm", "detail": detail}


def test_denied_calls_of_this_stacks_roles_reach_the_instructor():
    stack = expand(2)
    rule = stack.resources["DeniedCallsRule"]["Properties"]
    assert rule["State"] == "ENABLED_WITH_ALL_CLOUDTRAIL_MANAGEMENT_EVENTS"  # GetParameter is read-only
    pattern = rule["EventPattern"]
    for role in ("Learner01Role", "Lab02Role"):
        arn = stack.get_att(role, "Arn")
        for error in ("AccessDenied", "AccessDeniedException", "Client.UnauthorizedOperation"):
            assert event_matches(pattern, cloudtrail_event(arn, error)), (role, error)
        assert not event_matches(pattern, cloudtrail_event(arn, None))
        assert not event_matches(pattern, cloudtrail_event(arn, "ThrottlingException"))
    # The roles of another stack, even one whose name begins with this one's, do not match.
    for other in (f"arn:aws:iam::{ACCOUNT}:role/{STACK}-x/{STACK}-x-Learner01Role-ABC",
                  f"arn:aws:iam::{ACCOUNT}:role/other-class/Learner01Role",
                  f"arn:aws:iam::{ACCOUNT}:role/{STACK}-Learner01Role-ABC"):
        assert not event_matches(pattern, cloudtrail_event(other, "AccessDenied")), other
    (target,) = rule["Targets"]
    topic = stack.resources["DeniedCallsTopic"]["Properties"]
    assert target["Arn"] == stack.ref("DeniedCallsTopic")
    assert topic["Subscription"] == [{"Protocol": "email", "Endpoint": "instructor@example.org"}]
    (publish,) = stack.resources["DeniedCallsTopicPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert publish["Principal"] == {"Service": "events.amazonaws.com"}
    assert publish["Condition"] == {"ArnEquals": {"aws:SourceArn": stack.get_att("DeniedCallsRule", "Arn")}}


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
        header = lab["Properties"]["UserData"]
        assert f"export LAB_SIGNAL_URL='{stack.ref(f'Lab{seat}Signal')}'" in header


def test_the_largest_class_fits_cloudformations_quotas():
    stack = largest_class()
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


def test_the_checklists_policy_files_are_the_expanded_policies(tmp_path):
    """`python -m tests.cfn_expand TEMPLATE DIR`, which the pre-class checklist hands to IAM
    Access Analyzer, writes each role's policies as the stack would create them."""
    import json

    from deploy.template import TEMPLATE
    from tests.cfn_expand import write_policies

    written = {p.rsplit("/", 1)[-1] for p in write_policies(str(TEMPLATE), str(tmp_path))}
    assert written == {f"{role}{n}Role.{name}.json" for n in ("01", "02") for role, names in (
        ("Lab", ("trust", "systems-manager-agent", "publish-own-token", "credentials-stay-in-the-labs-vpc",
                 "read-classroom-cache")), ("Learner", ("trust", "own-lab-only"))) for name in names}
    stack = expand(2, ClassroomCacheUrl=CACHE)
    assert json.loads((tmp_path / "Learner02Role.own-lab-only.json").read_text()) == policies(
        stack, "Learner02Role")[0]


# The pre-class checklist's step in lab 01's terminal (docs/workshop-stack.md): the calls it names
# before "refused" must be refused to lab 01's role at home, the calls after it allowed. The step
# once promised that lab 01's own token is refused, which stopped being true when the lab came to
# read it; an instructor would take the stack for broken, or learn to shrug at a step.
LAB_TERMINAL_STEP = re.compile(r"In lab 01's JupyterLab terminal:(.*?)Then copy", re.DOTALL)
SSM_PARAMETER_CALL = re.compile(r"`aws ssm (get-parameter|put-parameter) --name /([^/`\s]+)/lab(\d\d)/jupyter-token")
CLI_ACTIONS = {"get-parameter": "ssm:GetParameter", "put-parameter": "ssm:PutParameter"}


def check_the_checklists_lab_terminal_step(step: str, stack: Stack) -> None:
    step = " ".join(step.split())  # the page wraps commands across lines
    refused, said, rest = step.partition(" refused")
    assert said, f"the step names nothing refused: {step!r}"
    lab = policies(stack, "Lab01Role")
    for part, expected in ((refused, False), (rest, True)):
        calls = SSM_PARAMETER_CALL.findall(part)
        assert calls or not expected, f"the step names no call {'allowed' if expected else 'refused'}"
        for command, stack_name, seat in calls:
            assert stack_name == STACK, stack_name
            request = Request(CLI_ACTIONS[command], token(seat), lab_caller(stack, "01"))
            assert allowed(stack, lab, request) == expected, (
                f"the checklist says `aws ssm {command}` of lab {seat}'s token from lab 01 is "
                f"{'allowed' if expected else 'refused'}; the lab role decides otherwise")


def test_the_checklists_lab_terminal_step_is_what_the_lab_role_decides():
    from deploy.template import TEMPLATE

    page = (TEMPLATE.parent.parent / "docs" / "workshop-stack.md").read_text()
    (step,) = LAB_TERMINAL_STEP.findall(page)
    stack = expand(2)
    check_the_checklists_lab_terminal_step(step, stack)
    # Seeded: the step as it read before the lab role read its token (lab 01's own token among the refusals) fails, and so
    # does the page against a lab role that no longer reads its own token.
    stale = (" `aws ssm get-parameter --name /trn-class/lab01/jupyter-token` and `aws ssm put-parameter"
             " --name /trn-class/lab02/jupyter-token --type String --overwrite --value x` are both refused. ")
    with pytest.raises(AssertionError, match="lab 01's token from lab 01 is refused"):
        check_the_checklists_lab_terminal_step(stale, stack)
    mutated = copy.deepcopy(template())
    fragment = mutated["Resources"][LABS_LOOP][2]
    (publish,) = [p for p in fragment["Lab${Seat}Role"]["Properties"]["Policies"]
                  if isinstance(p, dict) and p.get("PolicyName") == "publish-own-token"]
    publish["PolicyDocument"]["Statement"][0]["Action"] = ["ssm:PutParameter"]
    write_only = Stack(mutated, stack.parameters)
    with pytest.raises(AssertionError, match="lab 01's token from lab 01 is allowed"):
        check_the_checklists_lab_terminal_step(step, write_only)
