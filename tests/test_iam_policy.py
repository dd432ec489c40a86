"""tests/iam_policy.py against the rules AWS documents (IAM User Guide, docs/workshop-stack.md cites
the pages), each with the case that tells a right evaluator from one that fails open."""
from __future__ import annotations

import pytest

from tests.iam_policy import PolicyNotModelled, Request, actions_granted, allows, decide

TOKEN = "arn:aws:ssm:us-east-1:111122223333:parameter/trn/lab02/jupyter-token"
ROLE = "arn:aws:iam::111122223333:role/trn/instructor"


def allow(condition: dict | None = None, **statement) -> list[dict]:
    body = {"Effect": "Allow", "Action": "ssm:GetParameter", "Resource": TOKEN, **statement}
    if condition is not None:
        body["Condition"] = condition
    return [{"Version": "2012-10-17", "Statement": [body]}]


def test_negated_operators_hold_when_the_key_is_absent():
    # "...unless an absent tag says otherwise": IAM allows it, so must the model.
    for operator in ("StringNotEquals", "StringNotLike", "ArnNotEquals", "ArnNotLike",
                     "StringNotEqualsIgnoreCase"):
        policy = allow({operator: {"ssm:resourceTag/owner": "someone"}})
        assert allows(policy, Request("ssm:GetParameter", TOKEN)), operator
        assert not allows(policy, Request("ssm:GetParameter", TOKEN,
                                          {"ssm:resourceTag/owner": "someone"})), operator
        assert allows(policy, Request("ssm:GetParameter", TOKEN, {"ssm:resourceTag/owner": "me"}))
    for operator in ("StringEquals", "StringLike", "ArnEquals", "Bool"):
        assert not allows(allow({operator: {"aws:SourceVpc": "*"}}), Request("ssm:GetParameter", TOKEN))
    assert allows(allow({"StringEqualsIfExists": {"aws:SourceVpc": "vpc-1"}}),
                  Request("ssm:GetParameter", TOKEN))


def test_condition_keys_compare_without_case_and_values_with_it():
    policy = allow({"StringLike": {"SSM:ResourceTag/Aws:SsmMessages:Session-Id": "*"}})
    assert allows(policy, Request("ssm:GetParameter", TOKEN,
                                  {"ssm:resourceTag/aws:ssmmessages:session-id": "AROA:x"}))
    exact = allow({"StringEquals": {"aws:userid": "AROA:Learner"}})
    assert not allows(exact, Request("ssm:GetParameter", TOKEN, {"AWS:UserId": "AROA:learner"}))
    assert allows(exact, Request("ssm:GetParameter", TOKEN, {"AWS:UserId": "AROA:Learner"}))


def test_the_null_operator_and_a_missing_policy_variable():
    present = allow({"Null": {"ec2:SourceInstanceARN": "false"}})
    assert allows(present, Request("ssm:GetParameter", TOKEN, {"ec2:SourceInstanceArn": "arn:x"}))
    assert not allows(present, Request("ssm:GetParameter", TOKEN))
    assert allows(allow({"Null": {"aws:SourceVpc": "true"}}), Request("ssm:GetParameter", TOKEN))
    # AWS's statement that keeps EC2 role credentials in their VPC (aws:Ec2InstanceSourceVpc).
    deny = [{"Statement": [{"Effect": "Deny", "Action": "*", "Resource": "*", "Condition": {
        "StringNotEquals": {"aws:SourceVpc": "${aws:Ec2InstanceSourceVpc}"},
        "Null": {"ec2:SourceInstanceARN": "false"},
        "BoolIfExists": {"aws:ViaAWSService": "false"}}}]}]
    lab = {"ec2:SourceInstanceARN": "arn:i", "aws:Ec2InstanceSourceVpc": "vpc-1"}
    assert decide(deny, Request("ssm:PutParameter", TOKEN, {**lab, "aws:SourceVpc": "vpc-1"})) == "ImplicitDeny"
    assert decide(deny, Request("ssm:PutParameter", TOKEN, lab)) == "ExplicitDeny"  # off the VPC
    assert decide(deny, Request("ssm:PutParameter", TOKEN, {**lab, "aws:SourceVpc": "vpc-2"})) == "ExplicitDeny"
    assert decide(deny, Request("kms:Decrypt", "*", {**lab, "aws:ViaAWSService": "true"})) == "ImplicitDeny"
    assert decide(deny, Request("ssm:PutParameter", TOKEN, {"aws:SourceVpc": "vpc-2"})) == "ImplicitDeny"
    with pytest.raises(PolicyNotModelled):
        allows(allow({"Null": {"aws:SourceVpc": "maybe"}}), Request("ssm:GetParameter", TOKEN))


@pytest.mark.parametrize("inverted", [{"NotAction": "ssm:StartSession", "Resource": TOKEN},
                                      {"Action": "ssm:GetParameter", "NotResource": "arn:aws:s3:::*"}])
def test_inverted_elements_are_refused(inverted):
    policy = [{"Statement": [{"Effect": "Allow", **inverted}]}]
    with pytest.raises(PolicyNotModelled):
        allows(policy, Request("ssm:GetParametersByPath", TOKEN))
    if "NotAction" in inverted:
        with pytest.raises(PolicyNotModelled):
            actions_granted(policy)
    trust = [{"Statement": [{"Effect": "Deny", "NotPrincipal": {"AWS": ROLE}, "Action": "sts:AssumeRole"}]}]
    with pytest.raises(PolicyNotModelled):
        allows(trust, Request("sts:AssumeRole", "", {}, ROLE), trust=True)


@pytest.mark.parametrize("principal", [
    {"AWS": [ROLE, "*"]}, {"AWS": "*"}, "*", {"AWS": [ROLE, "arn:aws:iam::111122223333:root"]},
    {"AWS": "111122223333"}, {"AWS": "arn:aws:iam::111122223333:role/*"},
    {"Service": "*"}, {"Service": "*.amazonaws.com"}, {"AWS": ROLE, "Service": "ec2.amazonaws.com"},
    {"AWS": ROLE, "Federated": "cognito-identity.amazonaws.com"}])
def test_any_principal_but_exact_arns_is_refused(principal):
    trust = [{"Statement": [{"Effect": "Allow", "Principal": principal, "Action": "sts:AssumeRole"}]}]
    with pytest.raises(PolicyNotModelled):
        allows(trust, Request("sts:AssumeRole", "", {}, ROLE), trust=True)


def test_exact_principals_match_exactly():
    trust = [{"Statement": [{"Effect": "Allow", "Principal": {"AWS": [ROLE]}, "Action": "sts:AssumeRole"}]}]
    assert allows(trust, Request("sts:AssumeRole", "", {}, ROLE), trust=True)
    assert not allows(trust, Request("sts:AssumeRole", "", {}, ROLE + "2"), trust=True)
    # A service principal is that service: no role or user, whatever its name, is it.
    ec2 = [{"Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"},
                           "Action": "sts:AssumeRole"}]}]
    assert allows(ec2, Request("sts:AssumeRole", "", {}, "ec2.amazonaws.com"), trust=True)
    for caller in (ROLE, "arn:aws:iam::111122223333:role/ec2.amazonaws.com", "ssm.amazonaws.com"):
        assert not allows(ec2, Request("sts:AssumeRole", "", {}, caller), trust=True)


@pytest.mark.parametrize("statement", [
    {"Effect": "Allow", "Action": "ssm:GetParameter"},  # no Resource
    {"Effect": "Allow", "Action": "ssm:GetParameter", "Resource": TOKEN, "Principal": "*"},
    {"Effect": "Audit", "Action": "ssm:GetParameter", "Resource": TOKEN},
    {"Effect": "Allow", "Action": "ssm:GetParameter", "Resource": TOKEN,
     "Condition": {"ForAnyValue:StringEquals": {"aws:TagKeys": "x"}}},
    {"Effect": "Allow", "Action": "ssm:GetParameter", "Resource": TOKEN,
     "Condition": {"IpAddress": {"aws:SourceIp": "192.0.2.0/24"}}}])
def test_what_the_model_does_not_cover_raises(statement):
    with pytest.raises(PolicyNotModelled):
        allows([{"Statement": [statement]}], Request("ssm:GetParameter", TOKEN, {"aws:TagKeys": "x",
                                                                                "aws:SourceIp": "192.0.2.1"}))


def test_wildcards_actions_and_an_explicit_deny():
    policy = allow(Action="SSM:Get*", Resource="arn:aws:ssm:*:*:parameter/trn/lab0?/jupyter-token")
    assert allows(policy, Request("ssm:GetParametersByPath", TOKEN))
    assert not allows(policy, Request("ssm:GetParameter", TOKEN.replace("lab02", "lab102")))
    denied = policy + [{"Statement": {"Effect": "Deny", "Action": "ssm:*", "Resource": "*"}}]
    assert decide(denied, Request("ssm:GetParameter", TOKEN)) == "ExplicitDeny"
