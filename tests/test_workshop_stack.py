"""deploy/workshop.yaml, without AWS: cfn-lint (pinned) passes, and the template holds what
docs/workshop-stack.md promises: no inbound rule at all (so none from 0.0.0.0/0 or ::/0), the AMI
from the DLAMI's public SSM parameter and no AMI id anywhere, the root volume of the size the setup
guide asks for (read from docs/sources.md) deleted with the instance, an instance role with
Systems Manager and no more, shutdown stopping (never terminating) the instance, a creation policy
waiting for each lab's signal, and the user data embedded unchanged from deploy/user_data.sh."""
from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.template import TEMPLATE, USER_DATA, embedded_user_data, lab_resources, load, synced_text
from tests.paths import REPO_ROOT

SOURCES = (REPO_ROOT / "docs" / "sources.md").read_text()
SSM_PARAMETER = "/aws/service/neuron/dlami/pytorch-2.9/ubuntu-24.04/latest/image_id"
OPEN_TO_ALL = {"0.0.0.0/0", "::/0"}


@pytest.fixture(scope="module")
def template():
    return load()


def test_cfn_lint_passes():
    cfn_lint = Path(sys.executable).parent / "cfn-lint"
    result = subprocess.run([str(cfn_lint), str(TEMPLATE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_cfn_lint_is_the_pinned_one():
    from importlib.metadata import version

    assert f"cfn-lint=={version('cfn-lint')}\n" in (REPO_ROOT / "requirements.txt").read_text()


def ingress_rules(template: dict) -> list[dict]:
    """Every inbound rule: inline in a security group, or a SecurityGroupIngress resource (the
    labs' own resources included)."""
    resources = {k: v for k, v in template["Resources"].items() if not k.startswith("Fn::")}
    resources.update(lab_resources(template))
    rules = []
    for resource in resources.values():
        properties = resource.get("Properties", {})
        if resource["Type"] == "AWS::EC2::SecurityGroup":
            rules += properties.get("SecurityGroupIngress", [])
        elif resource["Type"] == "AWS::EC2::SecurityGroupIngress":
            rules.append(properties)
    return rules


def test_no_port_is_open_to_anyone(template):
    assert ingress_rules(template) == []
    # The check itself sees a rule open to the internet, inline or as a resource of its own.
    opened = copy.deepcopy(template)
    opened["Resources"]["LabSecurityGroup"]["Properties"]["SecurityGroupIngress"] = [
        {"IpProtocol": "tcp", "FromPort": 8888, "ToPort": 8888, "CidrIp": "0.0.0.0/0"}]
    opened["Resources"]["Ssh"] = {"Type": "AWS::EC2::SecurityGroupIngress", "Properties": {
        "GroupId": {"Ref": "LabSecurityGroup"}, "IpProtocol": "tcp", "FromPort": 22,
        "ToPort": 22, "CidrIpv6": "::/0"}}
    found = {rule.get("CidrIp") or rule.get("CidrIpv6") for rule in ingress_rules(opened)}
    assert found == OPEN_TO_ALL


def test_the_ami_comes_from_the_dlamis_public_ssm_parameter(template):
    assert not re.search(r"\bami-[0-9a-f]{8,17}\b", TEMPLATE.read_text())
    parameter = template["Parameters"]["ImageId"]
    assert parameter["Type"] == "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>"
    assert parameter["Default"] == SSM_PARAMETER
    # the path the DLAMI guide documents, as docs/sources.md quotes it
    assert "/aws/service/neuron/dlami/pytorch-2.9/ubuntu-24.04/latest/image_id" in SOURCES
    (lab,) = lab_resources(template).values()
    assert lab["Properties"]["ImageId"] == {"Ref": "ImageId"}


def test_the_root_volume_is_the_setup_guides_size_and_goes_with_the_instance(template):
    cited = re.search(r"adjust your primary EBS volume size to a minimum of (\d+)GB", SOURCES)
    assert cited, "docs/sources.md must quote the setup guide's volume size"
    (lab,) = lab_resources(template).values()
    (root,) = lab["Properties"]["BlockDeviceMappings"]
    assert root["Ebs"] == {"VolumeSize": int(cited.group(1)), "VolumeType": "gp3",
                           "Encrypted": True, "DeleteOnTermination": True}


def test_the_instance_role_has_systems_manager_and_no_more(template):
    role = template["Resources"]["LabRole"]["Properties"]
    assert role["ManagedPolicyArns"] == [
        {"Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"}]
    token, cache = role["Policies"]
    assert token["PolicyDocument"]["Statement"] == [{
        "Effect": "Allow", "Action": "ssm:PutParameter",
        "Resource": {"Fn::Sub": "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:"
                                "parameter/${AWS::StackName}/lab*/jupyter-token"}}]
    # The classroom cache's one object, only when an archive is given.
    condition, given, not_given = cache["Fn::If"]
    assert condition == "HasCacheArchive" and not_given == {"Ref": "AWS::NoValue"}
    (read,) = given["PolicyDocument"]["Statement"]
    assert read["Action"] == "s3:GetObject"
    assert read["Resource"]["Fn::Sub"][1] == {
        "Object": {"Fn::Select": [1, {"Fn::Split": ["s3://", {"Ref": "ClassroomCacheUrl"}]}]}}
    assert template["Conditions"]["HasCacheArchive"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "ClassroomCacheUrl"}, ""]}]}


def test_each_lab_stops_on_shutdown_and_the_stack_waits_for_its_signal(template):
    (lab,) = lab_resources(template).values()
    assert lab["Properties"]["InstanceInitiatedShutdownBehavior"] == "stop"
    assert lab["Properties"]["MetadataOptions"] == {"HttpTokens": "required"}
    assert lab["CreationPolicy"]["ResourceSignal"]["Count"] == 1
    assert lab["Properties"]["SecurityGroupIds"] == [{"Ref": "LabSecurityGroup"}]


def test_the_user_data_is_deploy_user_data_sh_after_a_header_of_its_values(template):
    header, body = embedded_user_data(template)
    assert body == USER_DATA.read_text(), "run: python -m deploy.template --sync"
    exported = set(re.findall(r"\b(LAB_[A-Z_]+)=", header))
    required = set(re.findall(r'"\$\{(LAB_[A-Z_]+)\??:?\?\}"', body))
    assert exported == required == {
        "LAB_STACK", "LAB_REGION", "LAB_RESOURCE", "LAB_REPOSITORY_URL", "LAB_REPOSITORY_REF",
        "LAB_CACHE_ARCHIVE", "LAB_IDLE_MINUTES", "LAB_TOKEN_PARAMETER"}
    # The signal goes to the lab's own logical id, the token to the parameter the role may write.
    assert "LAB_RESOURCE='Lab${Seat}'" in header
    assert "LAB_TOKEN_PARAMETER='/${AWS::StackName}/lab${Seat}/jupyter-token'" in header


def test_sync_puts_a_changed_script_in_place_and_nothing_else():
    text = TEMPLATE.read_text()
    assert synced_text(text, USER_DATA.read_text()) == text
    changed = synced_text(text, USER_DATA.read_text() + "echo one more line\n")
    assert changed != text and len(changed.splitlines()) == len(text.splitlines()) + 1
    assert changed.replace(" " * 22 + "echo one more line\n", "") == text


def test_a_class_of_n_learners_gets_seats_01_to_n(template):
    seats = template["Mappings"]["Seats"]
    count = template["Parameters"]["LearnerCount"]
    assert (count["MinValue"], count["MaxValue"]) == (1, len(seats)) == (1, 40)
    assert {n: seats[n]["Seats"] for n in seats} == {
        str(n): [f"{i:02d}" for i in range(1, n + 1)] for n in range(1, 41)}
    identifier, collection, _ = template["Resources"]["Fn::ForEach::Labs"]
    assert (identifier, collection) == (
        "Seat", {"Fn::FindInMap": ["Seats", {"Ref": "LearnerCount"}, "Seats"]})
    assert template["Outputs"]["Fn::ForEach::LabOutputs"][:2] == [identifier, collection]


def test_each_learner_gets_the_command_that_opens_their_lab(template):
    outputs = template["Outputs"]["Fn::ForEach::LabOutputs"][2]
    command = outputs["Lab${Seat}Open"]["Value"]["Fn::Sub"]
    assert "--name /${AWS::StackName}/lab${Seat}/jupyter-token" in command
    assert "--target ${Lab${Seat}} --document-name AWS-StartPortForwardingSession" in command
    assert '\'{"portNumber":["8888"],"localPortNumber":["8888"]}\'' in command
    assert "http://127.0.0.1:8888/lab?token=" in command
    assert outputs["Lab${Seat}Ssh"]["Condition"] == "HasKey"


def test_the_instructor_pages_costs_follow_from_the_cited_rates(template):
    page = (REPO_ROOT / "docs" / "workshop-stack.md").read_text()
    prices = json.loads((REPO_ROOT / "helpers" / "data" / "trn1_costs.json").read_text())["prices"]
    hourly = next(p["usd_per_hour"] for p in prices if p["instance"] == "trn1.2xlarge")
    gp3 = float(re.search(r'"\$(\d+\.\d+) per GB-month of General Purpose \(gp3\)', SOURCES).group(1))
    (lab,) = lab_resources(template).values()
    size = lab["Properties"]["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"]
    assert f"${hourly:.2f} per learner-hour" in page
    assert f"${20 * 3 * hourly:.2f} for a 3-hour workshop" in page
    assert f"{size} × ${gp3:.2f} per GB-month = ${size * gp3:.2f} a month" in page
    assert f"about ${size * gp3 / 30:.2f} a day" in page and f"${20 * size * gp3 / 30:.0f} a day" in page
