"""deploy/workshop.yaml as CloudFormation would create it for given parameter values, without AWS:
Fn::ForEach written out over its collection (the AWS::LanguageExtensions transform), conditions
decided, and every intrinsic function the template uses resolved (Ref, Fn::GetAtt, Fn::Sub with its
`${!literal}` escape, Fn::Join, Fn::Select, Fn::Split, Fn::FindInMap with DefaultValue, Fn::Length,
Fn::If, Fn::Equals, Fn::Not, Fn::Base64 kept as text). A resource's Ref is a made-up physical id
of the kind AWS returns (an instance id, a role name, a presigned URL, a topic's ARN), the same for
the same logical id, or the name the template gives it (an SSM parameter's Name); a role's Arn
carries its Path. So policies can be read as the ARNs a request would carry (tests/iam_policy.py).

Functions it does not know raise: a template that starts using one fails the tests here instead
of being read wrongly."""
from __future__ import annotations

import copy
import hashlib
import re

ACCOUNT, REGION, PARTITION, STACK = "111122223333", "us-east-1", "aws", "trn-class"
PSEUDO = {"AWS::AccountId": ACCOUNT, "AWS::Region": REGION, "AWS::Partition": PARTITION,
          "AWS::StackName": STACK, "AWS::URLSuffix": "amazonaws.com"}
NO_VALUE = object()


def physical_id(logical_id: str, resource_type: str) -> str:
    digest = hashlib.sha256(logical_id.encode()).hexdigest()
    if resource_type == "AWS::EC2::Instance":
        return f"i-{digest[:17]}"
    if resource_type == "AWS::CloudFormation::WaitConditionHandle":
        return (f"https://cloudformation-waitcondition-{REGION}.s3.amazonaws.com/"
                f"arn%3Aaws%3Acloudformation%3A{REGION}%3A{ACCOUNT}%3Astack/{STACK}/{logical_id}"
                f"?X-Amz-Expires=86399")
    if resource_type == "AWS::EC2::SecurityGroup":
        return f"sg-{digest[:17]}"
    if resource_type == "AWS::EC2::LaunchTemplate":
        return f"lt-{digest[:17]}"
    return f"{STACK}-{logical_id}-{digest[:12].upper()}"


def _substitute(value, identifier: str, item: str):
    """Fn::ForEach's replacement of ${Identifier} (and a Ref to it) in keys and values."""
    if isinstance(value, str):
        return value.replace("${" + identifier + "}", item)
    if isinstance(value, list):
        return [_substitute(v, identifier, item) for v in value]
    if isinstance(value, dict):
        if value == {"Ref": identifier}:
            return item
        return {_substitute(k, identifier, item): _substitute(v, identifier, item)
                for k, v in value.items()}
    return value


class Stack:
    """One stack: the template expanded for `parameters` (names to values; lists for List<...>)."""

    def __init__(self, template: dict, parameters: dict):
        self.template = copy.deepcopy(template)
        declared = self.template["Parameters"]
        self.parameters = {name: declared[name].get("Default") for name in declared}
        self.parameters.update(parameters)
        missing = [n for n, v in self.parameters.items() if v is None]
        if missing:
            raise ValueError(f"no value for the parameters {missing}")
        self.raw_resources = self._for_each(self.template["Resources"])
        self.conditions = {name: self.resolve(body)
                           for name, body in self.template.get("Conditions", {}).items()}
        self.resources = {}
        for logical_id, resource in self.raw_resources.items():
            if "Condition" in resource and not self.conditions[resource["Condition"]]:
                continue
            self.resources[logical_id] = {**resource, "Properties": self.resolve(
                resource.get("Properties", {}))}
        self.outputs = {k: self.resolve(v["Value"]) for k, v in
                        self._for_each(self.template.get("Outputs", {})).items()}

    def _for_each(self, section: dict) -> dict:
        out = {}
        for key, value in section.items():
            if key.startswith("Fn::ForEach::"):
                identifier, collection, fragment = value
                for item in self.resolve(collection):
                    out.update(self._for_each(_substitute(fragment, identifier, item)))
            else:
                out[key] = value
        return out

    def ref(self, name: str):
        if name in PSEUDO:
            return PSEUDO[name]
        if name in self.parameters:
            return self.parameters[name]
        if name in self.raw_resources:
            resource = self.raw_resources[name]
            if resource["Type"] == "AWS::SSM::Parameter":
                return self.resolve(resource["Properties"]["Name"])
            if resource["Type"] == "AWS::IAM::Role" and "RoleName" in resource.get("Properties", {}):
                return self.resolve(resource["Properties"]["RoleName"])
            if resource["Type"] == "AWS::IAM::ManagedPolicy":  # its Ref is its ARN
                path = self.resolve(resource.get("Properties", {}).get("Path", "/"))
                return f"arn:{PARTITION}:iam::{ACCOUNT}:policy{path}{physical_id(name, resource['Type'])}"
            if resource["Type"] == "AWS::SNS::Topic":
                return f"arn:{PARTITION}:sns:{REGION}:{ACCOUNT}:{physical_id(name, resource['Type'])}"
            return physical_id(name, resource["Type"])
        raise KeyError(f"Ref to an unknown name {name}")

    def get_att(self, logical_id: str, attribute: str):
        resource_type = self.raw_resources[logical_id]["Type"]
        if resource_type == "AWS::IAM::Role" and attribute == "Arn":
            path = self.resolve(self.raw_resources[logical_id].get("Properties", {}).get("Path", "/"))
            return f"arn:{PARTITION}:iam::{ACCOUNT}:role{path}{self.ref(logical_id)}"
        if resource_type == "AWS::Events::Rule" and attribute == "Arn":
            return f"arn:{PARTITION}:events:{REGION}:{ACCOUNT}:rule/{physical_id(logical_id, resource_type)}"
        if resource_type == "AWS::EC2::LaunchTemplate" and attribute == "LatestVersionNumber":
            return "1"
        if resource_type == "AWS::CloudFormation::WaitCondition" and attribute == "Data":
            # A JSON object of the signals' UniqueId to Data, known once the lab has signalled.
            return f"{{signals of {logical_id}}}"
        raise KeyError(f"Fn::GetAtt {logical_id}.{attribute} is not modelled")

    def _sub(self, text: str, values: dict) -> str:
        def one(match):
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in values:
                return str(values[name])
            if "." in name and name.split(".")[0] in self.raw_resources:
                return str(self.get_att(*name.split(".", 1)))
            return str(self.ref(name))
        return re.sub(r"\$\{([^}]+)\}", one, text)

    def resolve(self, value):
        if isinstance(value, list):
            items = [self.resolve(v) for v in value]
            return [v for v in items if v is not NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            (function, argument), = value.items()
            if function == "Ref":
                return NO_VALUE if argument == "AWS::NoValue" else self.ref(argument)
            if function.startswith("Fn::") or function == "Condition":
                return self._function(function, argument)
        resolved = {k: self.resolve(v) for k, v in value.items()}
        return {k: v for k, v in resolved.items() if v is not NO_VALUE}

    def _function(self, function: str, argument):
        if function == "Condition":
            return self.conditions[argument]
        if function == "Fn::If":
            name, when_true, when_false = argument
            return self.resolve(when_true if self.conditions[name] else when_false)
        if function == "Fn::Sub":
            text, values = (argument, {}) if isinstance(argument, str) else argument
            return self._sub(text, {k: self.resolve(v) for k, v in values.items()})
        if function == "Fn::GetAtt":
            logical_id, attribute = argument if isinstance(argument, list) else argument.split(".", 1)
            logical_id = self.resolve(logical_id)  # a name written with Fn::Sub inside Fn::ForEach
            return self.get_att(logical_id, attribute)
        args = self.resolve(argument)
        if function == "Fn::Equals":
            return args[0] == args[1]
        if function == "Fn::Not":
            return not args[0]
        if function == "Fn::Join":
            return args[0].join(str(a) for a in args[1])
        if function == "Fn::Select":
            return args[1][int(args[0])]
        if function == "Fn::Split":
            return args[1].split(args[0])
        if function == "Fn::Length":
            return len(args)
        if function == "Fn::Base64":
            return args
        if function == "Fn::FindInMap":
            mapping, top, second = args[:3]
            default = args[3]["DefaultValue"] if len(args) > 3 else NO_VALUE
            value = self.template["Mappings"][mapping].get(str(top), {}).get(str(second), default)
            if value is NO_VALUE:
                raise KeyError(f"Fn::FindInMap {mapping}/{top}/{second}: no such key")
            return value
        raise NotImplementedError(f"{function} is not modelled")

    def of_type(self, resource_type: str) -> dict[str, dict]:
        return {k: v for k, v in self.resources.items() if v["Type"] == resource_type}


# The properties of a role this module reads; any other (a PermissionsBoundary, ...) is refused.
ROLE_PROPERTIES = {"AssumeRolePolicyDocument", "Policies", "ManagedPolicyArns", "Path", "RoleName",
                   "Description", "MaxSessionDuration", "Tags"}
# The resources that attach an identity policy to a role, and the property that names the roles.
ATTACHING = {"AWS::IAM::Policy": "Roles", "AWS::IAM::ManagedPolicy": "Roles",
             "AWS::IAM::RolePolicy": "RoleName"}
# IAM resources that carry no policy of their own.
NO_POLICY = {"AWS::IAM::InstanceProfile"}


def _document(value) -> dict:
    """A policy document as CloudFormation takes it: an object, or the same as a JSON string."""
    if isinstance(value, str):
        import json

        return json.loads(value)
    return value


def _documents(value) -> list:
    """Every policy document (a dict with a Statement, or a JSON string of one) inside `value`."""
    if isinstance(value, str) and '"Statement"' in value:
        import json

        try:
            return _documents(json.loads(value))
        except ValueError:
            from tests.iam_policy import PolicyNotModelled

            raise PolicyNotModelled(f"a string naming a Statement that is not JSON: {value[:80]!r}") from None
    if isinstance(value, dict):
        if "Statement" in value:
            return [value]
        return [d for v in value.values() for d in _documents(v)]
    if isinstance(value, list):
        return [d for v in value for d in _documents(v)]
    return []


def role_policies(stack: Stack) -> dict[str, dict[str, dict]]:
    """Every policy that reaches each IAM role of the expanded stack, by the role's logical id:
    {"trust": its trust policy, <name>: each identity policy}. An identity policy reaches a role
    inline (Policies, by PolicyName), through ManagedPolicyArns (the stack's own
    AWS::IAM::ManagedPolicy, by its logical id), or from an AWS::IAM::Policy, ManagedPolicy or
    RolePolicy naming the role (by the attaching resource's logical id). Whatever else could grant
    or carries a policy raises PolicyNotModelled: a managed policy the stack does not define, a
    permissions boundary, a policy attached to a user, a group or a role the stack does not make,
    any other IAM resource, and a resource policy naming anything but a service principal."""
    from tests.iam_policy import PolicyNotModelled

    roles = stack.of_type("AWS::IAM::Role")
    by_name = {stack.ref(logical_id): logical_id for logical_id in roles}
    managed = {stack.ref(k): k for k in stack.of_type("AWS::IAM::ManagedPolicy")}
    found: dict[str, dict[str, dict]] = {}
    for logical_id, role in roles.items():
        properties = role["Properties"]
        unknown = set(properties) - ROLE_PROPERTIES
        if unknown:
            raise PolicyNotModelled(f"{logical_id} has {sorted(unknown)}: not read")
        found[logical_id] = {"trust": _document(properties["AssumeRolePolicyDocument"])}
        for policy in properties.get("Policies", []):
            found[logical_id][policy["PolicyName"]] = _document(policy["PolicyDocument"])
        for arn in properties.get("ManagedPolicyArns", []):
            if arn not in managed:
                raise PolicyNotModelled(f"{logical_id} carries the managed policy {arn}, which this "
                                        "stack does not define: its statements cannot be read")
            found[logical_id][managed[arn]] = _document(stack.resources[managed[arn]]["Properties"]["PolicyDocument"])
    for logical_id, resource in stack.resources.items():
        kind, properties = resource["Type"], resource.get("Properties", {})
        if kind in ATTACHING:
            if {"Users", "Groups"} & set(properties):
                raise PolicyNotModelled(f"{logical_id} is attached to users or groups: not read")
            names = properties.get(ATTACHING[kind], [])
            for name in [names] if isinstance(names, str) else names:
                if name not in by_name:
                    raise PolicyNotModelled(f"{logical_id} is attached to {name!r}, not a role of the stack")
                found[by_name[name]][logical_id] = _document(properties["PolicyDocument"])
        elif kind.startswith("AWS::IAM::") and kind not in NO_POLICY | {"AWS::IAM::Role"}:
            raise PolicyNotModelled(f"{logical_id} is an {kind}: not read")
        elif kind != "AWS::IAM::Role":
            for document in _documents(properties):
                for statement in document["Statement"] if isinstance(document["Statement"], list) \
                        else [document["Statement"]]:
                    principal = statement.get("Principal")
                    if "NotPrincipal" in statement or not (
                            isinstance(principal, dict) and set(principal) == {"Service"}):
                        raise PolicyNotModelled(f"the resource policy of {logical_id} names "
                                                f"{principal or statement.get('NotPrincipal')!r}: not read")
    return found


PARAMETERS = {"InstructorArn": f"arn:aws:iam::{ACCOUNT}:user/instructor",
              "InstructorEmail": "instructor@example.org", "RepositoryUrl": "https://example.org/workbook.git",
              "RepositoryCommit": "0" * 40, "ClassroomCacheUrl": "s3://class-bucket/classroom-cache.tar.gz",
              "VpcId": "vpc-0a", "SubnetIds": ["subnet-0a", "subnet-0b"], "RouteTableIds": ["rtb-0a1b2c3d"]}


def write_policies(template_path: str, out_dir: str) -> list[str]:
    """Every policy that reaches an IAM role (role_policies: inline, managed, attached by a
    separate resource, and the trust policy) of a class of two, expanded from the template at
    `template_path` with fixed parameters and made-up ids, one JSON file each (<role's logical
    id>.<policy name or attaching resource>.json, <role's logical id>.trust.json): what the
    pre-class checklist hands to IAM Access Analyzer (docs/workshop-stack.md). Two templates
    expanded this way share their ids, so check-no-new-access sees only what changed."""
    import json
    from pathlib import Path

    from deploy.template import load

    stack = Stack(load(Path(template_path)), {"LearnerCount": "2", **PARAMETERS})
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for logical_id, documents in role_policies(stack).items():
        for name, document in documents.items():
            path = out / f"{logical_id}.{name}.json"
            path.write_text(json.dumps(document, indent=1) + "\n")
            written.append(str(path))
    return written


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 3:
        sys.exit("usage: python -m tests.cfn_expand TEMPLATE OUT_DIR (writes each role's policies as JSON)")
    print("\n".join(write_policies(sys.argv[1], sys.argv[2])))
