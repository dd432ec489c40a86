"""The access checks catch a path from one seat to another: each edit below, seeded into
deploy/workshop.yaml, opens one in IAM (or is a policy the evaluator cannot read), and the checks of
tests/test_workshop_access.py, run in-process on the mutated template (a class of three), fail.
The first four are the edits that an evaluator failing open let through (issue 49); the fifth
takes away the statement that keeps a lab's credentials in its VPC."""
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
}


def mutated_stack(edit) -> Stack:
    mutated = copy.deepcopy(template())
    edit(mutated)
    return Stack(mutated, expand(3).parameters)


def failing_checks(stack: Stack) -> list[str]:
    failed = []
    for check in ALL_CHECKS:
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
    "anyone beside the instructor in the trust policy": "check_only_the_instructor_opens_a_seat: PolicyNotModelled",
    "the account's root beside the instructor": "check_only_the_instructor_opens_a_seat: PolicyNotModelled",
    "NotAction": "check_learners_reach_only_their_own_lab: PolicyNotModelled",
    "lab credentials that work off the lab": "check_labs_write_only_their_own_token_from_their_vpc: AssertionError",
}


@pytest.mark.parametrize("name", MUTANTS)
def test_each_seeded_path_is_caught(name):
    failed = failing_checks(mutated_stack(MUTANTS[name]))
    assert CAUGHT_BY[name] in failed, f"the seeded edit {name!r}: {failed or 'passed every access check'}"


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
