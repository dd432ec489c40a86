"""The access checks catch a path from one seat to another: each edit below, seeded into
deploy/workshop.yaml, opens one in IAM (or is a policy the evaluator cannot read), and the checks of
tests/test_workshop_access.py, run in-process on the mutated template (a class of three), fail.
The first four are the edits that an evaluator failing open let through (issue 49); the fifth
takes away the statement that keeps a lab's credentials in its VPC. Then one edit of each kind
that grants a learner another's lab, several forms each: a policy outside the role's own Policies (an AWS::IAM::Policy,
ManagedPolicy or RolePolicy naming the role, the stack's managed policy in ManagedPolicyArns, and
forms the checks do not read); an Allow conditioned on a key every signed request carries
(aws:SecureTransport, aws:RequestedRegion, aws:PrincipalAccount, aws:PrincipalArn); a trust policy
naming another seat's role by its real ARN."""
from __future__ import annotations

import copy

import pytest

from deploy.template import LABS_LOOP
from tests.cfn_expand import STACK, Stack
from tests.iam_policy import PolicyNotModelled, Request, allows
from tests.test_workshop_access import ALL_CHECKS, INSTRUCTOR, expand, learner, on_session, policies, template, token

EVERY_TOKEN = {"Fn::Sub": "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter/"
                          "${AWS::StackName}/lab*/jupyter-token"}
EVERY_SESSION = {"Fn::Sub": "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:session/*"}


def seat_fragment(mutated: dict) -> dict:
    return mutated["Resources"][LABS_LOOP][2]


def add_learner_statement(statement: dict):
    def edit(mutated: dict) -> None:
        document = seat_fragment(mutated)["Learner${Seat}Role"]["Properties"]["Policies"][0]
        document["PolicyDocument"]["Statement"].append(statement)
    return edit


def trust_also(principal: str):
    def edit(mutated: dict) -> None:
        trust = seat_fragment(mutated)["Learner${Seat}Role"]["Properties"]["AssumeRolePolicyDocument"]
        trust["Statement"][0]["Principal"] = {"AWS": [{"Ref": "InstructorArn"}, principal]}
    return edit


def add_seat_resource(logical_id: str, resource: dict):
    """A resource of each seat's own, beside its roles (inside Fn::ForEach::Labs)."""
    def edit(mutated: dict) -> None:
        seat_fragment(mutated)[logical_id] = resource
    return edit


def add_managed_policy_arn(arn):
    def edit(mutated: dict) -> None:
        role = seat_fragment(mutated)["Learner${Seat}Role"]["Properties"]
        role["ManagedPolicyArns"] = [arn]
        if isinstance(arn, dict):  # the stack's own managed policy, attached by the role
            seat_fragment(mutated)["Learner${Seat}Extra"] = {
                "Type": "AWS::IAM::ManagedPolicy", "Properties": {"PolicyDocument": EVERY_TOKEN_POLICY}}
    return edit


# What each seeded policy grants: every lab's token.
EVERY_TOKEN_POLICY = {"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Action": "ssm:GetParameter", "Resource": EVERY_TOKEN}]}
LEARNER_ROLE = {"Ref": "Learner${Seat}Role"}


def every_token_if(condition: dict):
    return add_learner_statement({"Effect": "Allow", "Action": "ssm:GetParameter",
                                  "Resource": EVERY_TOKEN, "Condition": condition})


def trust_also_the_role_of(role: str):
    """Learner NN's trust policy also names `role`'s real ARN (its path and generated name)."""
    def edit(mutated: dict) -> None:
        trust = seat_fragment(mutated)["Learner${Seat}Role"]["Properties"]["AssumeRolePolicyDocument"]
        trust["Statement"][0]["Principal"] = {"AWS": [{"Ref": "InstructorArn"}, {"Fn::GetAtt": [role, "Arn"]}]}
    return edit


def lab_statement_edit(sid: str, drop_condition: bool = False):
    """The lab role's statement `sid` without its Condition, or without the statement."""
    def edit(mutated: dict) -> None:
        for policy in seat_fragment(mutated)["Lab${Seat}Role"]["Properties"]["Policies"]:
            if "PolicyDocument" not in policy:  # the cache's Fn::If
                continue
            statements = policy["PolicyDocument"]["Statement"]
            for statement in [s for s in statements if s.get("Sid") == sid]:
                if drop_condition:
                    del statement["Condition"]
                else:
                    statements.remove(statement)
    return edit


def drop_the_vpc_statement(mutated: dict) -> None:
    role = seat_fragment(mutated)["Lab${Seat}Role"]["Properties"]
    role["Policies"] = [p for p in role["Policies"]
                        if not (isinstance(p, dict) and p.get("PolicyName") == "credentials-stay-in-the-labs-vpc")]


MUTANTS = {
    # Allow GetParameter on every lab's token "unless an absent tag says otherwise".
    "a negated operator on an absent key": add_learner_statement({
        "Effect": "Allow", "Action": "ssm:GetParameter", "Resource": EVERY_TOKEN,
        "Condition": {"StringNotEquals": {"ssm:resourceTag/workshop-not-for": "${aws:userid}"}}}),
    # ResumeSession on every session, its condition key written in another case.
    "a condition key in another case": add_learner_statement({
        "Effect": "Allow", "Action": "ssm:ResumeSession", "Resource": EVERY_SESSION,
        "Condition": {"StringLike": {"SSM:ResourceTag/aws:ssmmessages:session-id": "*"}}}),
    "anyone beside the instructor in the trust policy": trust_also("*"),
    "the account's root beside the instructor": trust_also("arn:aws:iam::111122223333:root"),
    # Allow NotAction: everything but StartSession on every parameter of the stack.
    "NotAction": add_learner_statement({
        "Effect": "Allow", "NotAction": ["ssm:StartSession"],
        "Resource": {"Fn::Sub": "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter/${AWS::StackName}/*"}}),
    "lab credentials that work off the lab": drop_the_vpc_statement,
    # Kind 1: a policy outside the role's own Policies.
    "an AWS::IAM::Policy naming the learner role": add_seat_resource("Learner${Seat}Extra", {
        "Type": "AWS::IAM::Policy", "Properties": {
            "PolicyName": "extra", "Roles": [LEARNER_ROLE], "PolicyDocument": EVERY_TOKEN_POLICY}}),
    "an AWS::IAM::ManagedPolicy naming the learner role": add_seat_resource("Learner${Seat}Extra", {
        "Type": "AWS::IAM::ManagedPolicy", "Properties": {
            "Roles": [LEARNER_ROLE], "PolicyDocument": EVERY_TOKEN_POLICY}}),
    "an AWS::IAM::RolePolicy naming the learner role": add_seat_resource("Learner${Seat}Extra", {
        "Type": "AWS::IAM::RolePolicy", "Properties": {
            "PolicyName": "extra", "RoleName": LEARNER_ROLE, "PolicyDocument": EVERY_TOKEN_POLICY}}),
    "the stack's managed policy in ManagedPolicyArns": add_managed_policy_arn({"Ref": "Learner${Seat}Extra"}),
    "an AWS managed policy in ManagedPolicyArns": add_managed_policy_arn(
        "arn:aws:iam::aws:policy/AmazonSSMReadOnlyAccess"),
    "a permissions boundary": lambda mutated: seat_fragment(mutated)["Learner${Seat}Role"][
        "Properties"].update(PermissionsBoundary="arn:aws:iam::aws:policy/AdministratorAccess"),
    "a bucket policy naming the learner role": add_seat_resource("Learner${Seat}Bucket", {
        "Type": "AWS::S3::BucketPolicy", "Properties": {"Bucket": "class-bucket", "PolicyDocument": {
            "Statement": [{"Effect": "Allow", "Principal": {"AWS": {"Fn::GetAtt": ["Learner${Seat}Role", "Arn"]}},
                           "Action": "s3:GetObject", "Resource": "arn:aws:s3:::class-bucket/*"}]}}}),
    "a log group's resource policy naming the role, as a JSON string": add_seat_resource("Learner${Seat}Logs", {
        "Type": "AWS::Logs::ResourcePolicy", "Properties": {"PolicyName": "extra", "PolicyDocument": {
            "Fn::Sub": '{"Statement": [{"Effect": "Allow", "Principal": {"AWS": "${Learner${Seat}Role.Arn}"}, '
                       '"Action": "logs:PutLogEvents", "Resource": "*"}]}'}}}),
    # Kind 2: an Allow conditioned on a key every signed request carries.
    "an Allow under aws:SecureTransport": every_token_if({"Bool": {"aws:SecureTransport": "true"}}),
    "an Allow under aws:RequestedRegion": every_token_if(
        {"StringEquals": {"aws:RequestedRegion": {"Ref": "AWS::Region"}}}),
    "an Allow under aws:PrincipalAccount": every_token_if(
        {"StringEquals": {"aws:PrincipalAccount": {"Ref": "AWS::AccountId"}}}),
    "an Allow under aws:PrincipalArn": every_token_if({"ArnLike": {"aws:PrincipalArn": {
        "Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/${AWS::StackName}/*"}}}),
    # Kind 3: a trust policy naming another seat's role, as the stack makes it.
    "a trust policy naming lab 01's role": trust_also_the_role_of("Lab01Role"),
    # The lab role's own narrowings (its association calls, its own source address), each taken away.
    "the association poll of every instance": lab_statement_edit("OwnInstanceAssociations", drop_condition=True),
    "lab credentials that work from any host of the VPC": lab_statement_edit("CredentialsStayOnTheLab"),
}


def mutated_stack(edit) -> Stack:
    mutated = copy.deepcopy(template())
    edit(mutated)
    return Stack(mutated, expand(3).parameters)


def failing_checks(stack: Stack, checks=ALL_CHECKS) -> list[str]:
    failed = []
    for check in checks:
        try:
            check(stack)
        except (AssertionError, PolicyNotModelled) as caught:
            failed.append(f"{check.__name__}: {type(caught).__name__}")
    return failed


def test_the_template_as_written_passes_every_check():
    assert failing_checks(expand(3)) == []


# The check that catches each edit, and how.
CAUGHT_BY = {
    "a negated operator on an absent key": "check_learners_reach_only_their_own_lab: AssertionError",
    "a condition key in another case": "check_learners_reach_only_their_own_lab: AssertionError",
    "anyone beside the instructor in the trust policy":
        "check_every_trust_policy_admits_only_its_principal: PolicyNotModelled",
    "the account's root beside the instructor":
        "check_every_trust_policy_admits_only_its_principal: PolicyNotModelled",
    "NotAction": "check_learners_reach_only_their_own_lab: PolicyNotModelled",
    "lab credentials that work off the lab": "check_labs_write_only_their_own_token_from_their_vpc: AssertionError",
    "an AWS::IAM::Policy naming the learner role": "check_learners_reach_only_their_own_lab: AssertionError",
    "an AWS::IAM::ManagedPolicy naming the learner role": "check_learners_reach_only_their_own_lab: AssertionError",
    "an AWS::IAM::RolePolicy naming the learner role": "check_learners_reach_only_their_own_lab: AssertionError",
    "the stack's managed policy in ManagedPolicyArns": "check_learners_reach_only_their_own_lab: AssertionError",
    "an AWS managed policy in ManagedPolicyArns": "check_learners_reach_only_their_own_lab: PolicyNotModelled",
    "a permissions boundary": "check_learners_reach_only_their_own_lab: PolicyNotModelled",
    "a bucket policy naming the learner role": "check_learners_reach_only_their_own_lab: PolicyNotModelled",
    "an Allow under aws:SecureTransport": "check_learners_reach_only_their_own_lab: AssertionError",
    "an Allow under aws:RequestedRegion": "check_learners_reach_only_their_own_lab: AssertionError",
    "an Allow under aws:PrincipalAccount": "check_learners_reach_only_their_own_lab: AssertionError",
    "an Allow under aws:PrincipalArn": "check_learners_reach_only_their_own_lab: AssertionError",
    "a trust policy naming lab 01's role": "check_every_trust_policy_admits_only_its_principal: AssertionError",
    "a log group's resource policy naming the role, as a JSON string":
        "check_learners_reach_only_their_own_lab: PolicyNotModelled",
    "the association poll of every instance": "check_labs_write_only_their_own_token_from_their_vpc: AssertionError",
    "lab credentials that work from any host of the VPC":
        "check_labs_write_only_their_own_token_from_their_vpc: AssertionError",
}


@pytest.mark.parametrize("name", MUTANTS)
def test_each_seeded_path_is_caught(name):
    """The check named in CAUGHT_BY fails on the mutated template, as it says (only that check
    runs: the template as written passes them all, above)."""
    check_name, kind = CAUGHT_BY[name].split(": ")
    (check,) = [c for c in ALL_CHECKS if c.__name__ == check_name]
    failed = failing_checks(mutated_stack(MUTANTS[name]), (check,))
    assert failed == [CAUGHT_BY[name]], f"the seeded edit {name!r}: {failed or 'passed ' + check_name}"


def test_the_seeded_conditions_open_a_real_path_in_iam():
    """Not only refused by the model: under AWS's rules the first two mutants let learner 01 read
    lab 02's token and resume lab 02's session."""
    negated = mutated_stack(MUTANTS["a negated operator on an absent key"])
    assert allows(policies(negated, "Learner01Role"), Request("ssm:GetParameter", token("02"), learner("01")))
    cased = mutated_stack(MUTANTS["a condition key in another case"])
    assert allows(policies(cased, "Learner01Role"), on_session("ssm:ResumeSession", "02", cased, learner("01")))
    trust = mutated_stack(MUTANTS["anyone beside the instructor in the trust policy"])
    principal = trust.resources["Learner01Role"]["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]
    assert principal["Principal"] == {"AWS": [INSTRUCTOR, "*"]} and STACK in str(principal["Condition"])


def test_the_seeded_kinds_open_a_real_path_in_iam():
    """Each kind of edit gives learner 01 lab 02 in IAM, as AWS evaluates a real request:
    the separate policies' Allow reaches the role; the global-key conditions hold in the context
    every signed request carries (tests/test_workshop_access.py, realistic()); lab 01's role,
    whose credentials a learner on lab 01 holds, assumes learner 02's role."""
    from tests.test_workshop_access import realistic, trust_policy

    for name in ("an AWS::IAM::Policy naming the learner role", "an AWS::IAM::ManagedPolicy naming the learner role",
                 "an AWS::IAM::RolePolicy naming the learner role", "the stack's managed policy in ManagedPolicyArns",
                 "an Allow under aws:SecureTransport", "an Allow under aws:RequestedRegion",
                 "an Allow under aws:PrincipalAccount", "an Allow under aws:PrincipalArn"):
        stack = mutated_stack(MUTANTS[name])
        request = Request("ssm:GetParameter", token("02"), learner("01"))
        signed = Request(request.action, request.resource, realistic(stack, request))
        assert allows(policies(stack, "Learner01Role"), signed), name
    stack = mutated_stack(MUTANTS["a trust policy naming lab 01's role"])
    hop = Request("sts:AssumeRole", stack.get_att("Learner02Role", "Arn"),
                  {"sts:RoleSessionName": f"{STACK}.learner02"}, stack.get_att("Lab01Role", "Arn"))
    assert stack.get_att("Lab01Role", "Arn").startswith(f"arn:aws:iam::111122223333:role/{STACK}/{STACK}-Lab01Role-")
    assert allows(trust_policy(stack, "Learner02Role"), Request(
        hop.action, hop.resource, realistic(stack, hop), hop.principal), trust=True)


def test_the_policy_export_covers_every_policy_that_reaches_a_role(tmp_path):
    """The files the pre-class Access Analyzer step reads hold the separate policies too, and a
    form the checks do not read stops the export as it stops them."""
    from tests.cfn_expand import role_policies

    stack = mutated_stack(MUTANTS["an AWS::IAM::ManagedPolicy naming the learner role"])
    documents = role_policies(stack)["Learner02Role"]
    assert documents["Learner02Extra"]["Statement"][0]["Resource"].endswith("/lab*/jupyter-token")
    written = {p.rsplit("/", 1)[-1] for p in write_policies_of(
        MUTANTS["an AWS::IAM::RolePolicy naming the learner role"], tmp_path / "out")}
    assert {"Learner01Role.Learner01Extra.json", "Learner02Role.Learner02Extra.json"} <= written
    with pytest.raises(PolicyNotModelled):
        write_policies_of(MUTANTS["an AWS managed policy in ManagedPolicyArns"], tmp_path / "refused")


def write_policies_of(edit, out_dir):
    import json

    from tests.cfn_expand import write_policies

    mutated = copy.deepcopy(template())
    edit(mutated)
    source = out_dir.parent / f"{out_dir.name}.json"
    source.write_text(json.dumps(mutated))
    return write_policies(str(source), str(out_dir))
