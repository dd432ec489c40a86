"""The IAM policy an instructor needs to create, update and delete the workshop stack and to run the
docs' own commands (deploy/instructor-policy.json; docs/workshop-stack.md, "The instructor's
permissions").

Derived, not hand-kept: every resource type deploy/workshop.yaml makes (inside Fn::ForEach too)
brings the permissions its registry schema lists under `handlers` create, update and delete
(cfn-lint ships the schemas); the two types with no handlers (the wait condition and its handle)
are named below with the reason they need nothing; the stack's own calls and the commands the docs
tell the instructor to run are listed with the page that runs them. IAM calls are narrowed to the
stack's roles (path /<stack>/) and instance profiles (<stack>-...), and it assumes only the
learner roles. The path is all IAM can narrow: a role made under it may carry any policy and be
passed to an instance, so the policy is as strong as an account administrator's (docs say so).

    python -m deploy.instructor_policy            # exit 1 when the file is not current
    python -m deploy.instructor_policy --write    # rewrite deploy/instructor-policy.json
    python -m deploy.instructor_policy --stack-name my-class --print   # for another stack name

tests/test_workshop_permissions.py holds the file to the expanded template (3 and 40 seats) and
to the docs' commands.
"""
from __future__ import annotations

import argparse
import json
import sys

from deploy.template import TEMPLATE, load

POLICY_FILE = TEMPLATE.parent / "instructor-policy.json"
DEFAULT_STACK = "trn-class"  # the stack name the docs use
HANDLERS = ("create", "update", "delete")
# Resource types with no handlers in their schema, and why the caller needs no permission for them.
NO_HANDLERS = {
    "AWS::CloudFormation::WaitConditionHandle": (
        "CloudFormation makes it itself: its Ref is a presigned URL CloudFormation signs, and the "
        "lab PUTs to it with no credentials (AWS::CloudFormation::WaitConditionHandle reference)"),
    "AWS::CloudFormation::WaitCondition": (
        "CloudFormation counts the signals its handle received; no call is made as the caller "
        "(Create wait conditions in a CloudFormation template)"),
}
# What CloudFormation calls as the caller for the stack itself.
STACK_CALLS = {
    "cloudformation:CreateStack": "create-stack",
    "cloudformation:UpdateStack": "update-stack",
    "cloudformation:DeleteStack": "delete-stack",
    "cloudformation:DescribeStacks": "describe-stacks, and the wait command polls it",
    "cloudformation:DescribeStackEvents": "describe-stack-events: each lab's signal and reason",
    "cloudformation:DescribeStackResources": "the console's and the CLI's resource view",
    "cloudformation:ListStackResources": "the console's and the CLI's resource view",
    "cloudformation:GetTemplate": "update-stack --use-previous-template reads it",
    "cloudformation:GetTemplateSummary": "the console reads the parameters before a create or update",
    "cloudformation:ValidateTemplate": "the console and the CLI validate the template first",
    "cloudformation:CreateChangeSet": "a template with a transform (AWS::LanguageExtensions) is "
                                      "created and updated through a change set",
    "cloudformation:DescribeChangeSet": "the change set of a transform, or one you review",
    "cloudformation:ExecuteChangeSet": "the change set of a transform, or one you review",
    "cloudformation:DeleteChangeSet": "a change set you reviewed and dropped",
    "cloudformation:RollbackStack": "a stack left in CREATE_FAILED by --on-failure DO_NOTHING",
    # ImageId is an AWS::SSM::Parameter::Value parameter: CloudFormation reads it as the caller.
    "ssm:GetParameters": "resolves ImageId, the DLAMI's public SSM parameter",
    "ec2:DescribeVpcs": "the VpcId parameter type and the SubnetsInTheVpc rule",
    "ec2:DescribeSubnets": "the SubnetIds parameter type and the SubnetsInTheVpc rule",
}
# Every `aws SERVICE COMMAND` the docs show, and what the instructor's own run of it calls; None
# for a command the docs show run with other credentials (a learner's or a lab's, to be refused).
DOCS = ("docs/workshop-stack.md", "docs/instructor.md")
DOCS_COMMANDS = {
    "aws cloudformation create-stack": ["cloudformation:CreateStack"],
    "aws cloudformation update-stack": ["cloudformation:UpdateStack"],
    "aws cloudformation delete-stack": ["cloudformation:DeleteStack"],
    "aws cloudformation describe-stacks": ["cloudformation:DescribeStacks"],
    "aws cloudformation describe-stack-events": ["cloudformation:DescribeStackEvents"],
    "aws cloudformation wait": ["cloudformation:DescribeStacks"],
    "aws cloudformation rollback-stack": ["cloudformation:RollbackStack"],
    "aws cloudformation list-stacks": ["cloudformation:ListStacks"],
    "aws sts assume-role": ["sts:AssumeRole"],
    "aws sts get-caller-identity": [],  # needs no permission (GetCallerIdentity's reference)
    "aws ec2 describe-instance-type-offerings": ["ec2:DescribeInstanceTypeOfferings"],
    "aws ec2 describe-instances": ["ec2:DescribeInstances"],
    "aws ec2 get-console-output": ["ec2:GetConsoleOutput"],
    "aws ec2 start-instances": ["ec2:StartInstances"],
    "aws ec2 stop-instances": ["ec2:StopInstances"],  # a failed spare lab (One bad lab, one seat)
    "aws ec2 modify-instance-attribute": None,  # the checklist: a learner's call, refused
    "aws s3api get-bucket-location": ["s3:GetBucketLocation"],
    "aws s3 cp": ["s3:PutObject", "s3:GetObject"],  # also CloudFormation reading --template-url
    "aws s3 rm": ["s3:DeleteObject"],
    "aws service-quotas list-service-quotas": ["servicequotas:ListServiceQuotas"],
    "aws ec2 delete-nat-gateway": ["ec2:DeleteNatGateway"],  # the tear-down of a class's own NAT
    "aws ec2 release-address": ["ec2:ReleaseAddress"],
    "aws ec2 cancel-capacity-reservation": ["ec2:CancelCapacityReservation"],
    "aws ssm start-session": ["ssm:StartSession", "ssm:TerminateSession", "ssm:ResumeSession"],
    "aws ssm send-command": ["ssm:SendCommand", "ssm:GetCommandInvocation"],
    "aws ssm get-command-invocation": ["ssm:GetCommandInvocation"],
    "aws ssm get-parameter": ["ssm:GetParameter"],
    "aws ssm get-parameters-by-path": ["ssm:GetParametersByPath"],
    "aws ssm describe-document": ["ssm:DescribeDocument"],
    "aws ssm update-document-default-version": ["ssm:UpdateDocumentDefaultVersion"],
    "aws ssm list-associations": ["ssm:ListAssociations"],
    "aws ssm describe-sessions": None,  # the checklist: a learner's call, refused
    "aws ssm put-parameter": None,  # the checklist: a lab's credentials, refused off the lab
    "aws cloudtrail describe-trails": ["cloudtrail:DescribeTrails"],
    "aws cloudtrail get-trail-status": ["cloudtrail:GetTrailStatus"],
    "aws accessanalyzer validate-policy": ["access-analyzer:ValidatePolicy"],
    "aws accessanalyzer check-no-new-access": ["access-analyzer:CheckNoNewAccess"],
}


def resource_types(template: dict) -> set[str]:
    """Every resource type the template makes, conditions aside, inside Fn::ForEach too."""
    def walk(section: dict) -> set[str]:
        found = set()
        for key, value in section.items():
            if key.startswith("Fn::ForEach::"):
                found |= walk(value[2])
            else:
                found.add(value["Type"])
        return found
    return walk(template["Resources"])


def handler_permissions(resource_type: str) -> set[str]:
    """The permissions the type's schema lists for create, update and delete ({} for no handlers)."""
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

    schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", resource_type).schema
    handlers = schema.get("handlers", {})
    if not handlers and resource_type not in NO_HANDLERS:
        raise ValueError(f"{resource_type} has no handlers in its schema: say in NO_HANDLERS what it needs")
    return {p for name in HANDLERS for p in handlers.get(name, {}).get("permissions", [])}


def docs_actions() -> set[str]:
    return {a for actions in DOCS_COMMANDS.values() if actions for a in actions}


def policy(template: dict, stack: str = DEFAULT_STACK) -> dict:
    """The instructor's policy for the template, its IAM calls narrowed to the stack `stack`'s."""
    actions = set(STACK_CALLS) | docs_actions()
    for resource_type in resource_types(template):
        actions |= handler_permissions(resource_type)
    iam = sorted(a for a in actions if a.startswith("iam:") and a != "iam:PassRole")
    sts = sorted(a for a in actions if a.startswith("sts:"))
    rest = sorted(a for a in actions if not a.startswith(("iam:", "sts:")))
    roles = f"arn:aws:iam::*:role/{stack}/*"
    return {"Version": "2012-10-17", "Statement": [
        {"Sid": "StackResourcesAndDocsCommands", "Effect": "Allow", "Action": rest, "Resource": "*"},
        {"Sid": "TheStacksRolesAndInstanceProfilesOnly", "Effect": "Allow", "Action": iam,
         "Resource": [roles, f"arn:aws:iam::*:instance-profile/{stack}-*"]},
        {"Sid": "PassTheLabRolesToEc2Only", "Effect": "Allow", "Action": "iam:PassRole",
         "Resource": roles, "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}},
        # the learner roles only (CloudFormation names them <stack>-LearnerNNRole-<suffix>): not a
        # role the instructor could make under the path with a policy of their choosing
        {"Sid": "HandOutTheSeats", "Effect": "Allow", "Action": sts,
         "Resource": f"arn:aws:iam::*:role/{stack}/{stack}-Learner*"},
    ]}


def render(document: dict) -> str:
    return json.dumps(document, indent=1) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.instructor_policy", description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {POLICY_FILE.name}")
    parser.add_argument("--print", action="store_true", help="print the policy")
    parser.add_argument("--stack-name", default=DEFAULT_STACK, help="narrow the IAM calls to this stack's roles")
    args = parser.parse_args(argv)
    text = render(policy(load(), args.stack_name))
    if args.print:
        sys.stdout.write(text)
        return 0
    if args.stack_name != DEFAULT_STACK:
        parser.error(f"{POLICY_FILE.name} is written for the stack {DEFAULT_STACK}; use --print for another")
    current = POLICY_FILE.exists() and POLICY_FILE.read_text() == text
    if args.write:
        if not current:
            POLICY_FILE.write_text(text)
        print(f"{POLICY_FILE.name}: {'already current' if current else 'written'}")
        return 0
    print(f"{POLICY_FILE.name}: {'current' if current else 'differs: run with --write'}")
    return 0 if current else 1


if __name__ == "__main__":
    sys.exit(main())
