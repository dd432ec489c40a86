"""deploy/workshop.yaml, without AWS: cfn-lint and checkov (each pinned) pass, checkov's skipped
checks each with its reason, and the template holds what docs/workshop-stack.md promises: no
inbound rule to a lab and none from any address (so none from 0.0.0.0/0 or ::/0), the AMI from the DLAMI's public SSM parameter
and no AMI id anywhere, the root volume of the size the setup guide asks for (read from
docs/sources.md) deleted with the instance, no AWS managed policy on any role, shutdown stopping
(never terminating) the instance, the repository pinned to a commit, and the user data embedded
unchanged from deploy/user_data.sh. Who may do what, seat by seat: tests/test_workshop_access.py."""
from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.template import TEMPLATE, USER_DATA, embedded_user_data, lab_instance, lab_resources, load, synced_text
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
    # The one inbound rule: https from the labs' own security group to the Systems Manager
    # endpoints. None from an address range, none to a lab.
    assert ingress_rules(template) == [{
        "IpProtocol": "tcp", "FromPort": 443, "ToPort": 443,
        "SourceSecurityGroupId": {"Ref": "LabSecurityGroup"},
        "Description": "https from the labs' security group"}]
    assert "SecurityGroupIngress" not in template["Resources"]["LabSecurityGroup"]["Properties"]
    # The check itself sees a rule open to the internet, inline or as a resource of its own.
    opened = copy.deepcopy(template)
    opened["Resources"]["LabSecurityGroup"]["Properties"]["SecurityGroupIngress"] = [
        {"IpProtocol": "tcp", "FromPort": 8888, "ToPort": 8888, "CidrIp": "0.0.0.0/0"}]
    opened["Resources"]["Ssh"] = {"Type": "AWS::EC2::SecurityGroupIngress", "Properties": {
        "GroupId": {"Ref": "LabSecurityGroup"}, "IpProtocol": "tcp", "FromPort": 22,
        "ToPort": 22, "CidrIpv6": "::/0"}}
    found = {rule.get("CidrIp") or rule.get("CidrIpv6") for rule in ingress_rules(opened)}
    assert found == OPEN_TO_ALL | {None}


def test_the_ami_comes_from_the_dlamis_public_ssm_parameter(template):
    assert not re.search(r"\bami-[0-9a-f]{8,17}\b", TEMPLATE.read_text())
    parameter = template["Parameters"]["ImageId"]
    assert parameter["Type"] == "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>"
    assert parameter["Default"] == SSM_PARAMETER
    # the path the DLAMI guide documents, as docs/sources.md quotes it
    assert "/aws/service/neuron/dlami/pytorch-2.9/ubuntu-24.04/latest/image_id" in SOURCES
    lab = lab_instance(template)
    assert lab["Properties"]["ImageId"] == {"Ref": "ImageId"}


def test_the_root_volume_is_the_setup_guides_size_and_goes_with_the_instance(template):
    cited = re.search(r"adjust your primary EBS volume size to a minimum of (\d+)GB", SOURCES)
    assert cited, "docs/sources.md must quote the setup guide's volume size"
    lab = lab_instance(template)
    (root,) = lab["Properties"]["BlockDeviceMappings"]
    assert root["Ebs"] == {"VolumeSize": int(cited.group(1)), "VolumeType": "gp3",
                           "Encrypted": True, "DeleteOnTermination": True}


def test_no_role_carries_an_aws_managed_policy(template):
    roles = [r for r in lab_resources(template).values() if r["Type"] == "AWS::IAM::Role"]
    assert len(roles) == 2 and all("ManagedPolicyArns" not in r["Properties"] for r in roles)
    assert "AmazonSSMManagedInstanceCore" not in TEMPLATE.read_text().replace(
        "as AmazonSSMManagedInstanceCore lists them", "")


def test_the_repository_is_a_commit_every_lab_checks_out(template):
    commit = template["Parameters"]["RepositoryCommit"]
    assert "Default" not in commit and commit["AllowedPattern"] == "^[0-9a-f]{40}$"
    pattern = re.compile(commit["AllowedPattern"])
    assert pattern.match("0123456789abcdef0123456789abcdef01234567")
    assert not any(pattern.match(ref) for ref in ("main", "v1.0", "0123456", "HEAD"))
    assert re.fullmatch(template["Parameters"]["RepositoryUrl"]["AllowedPattern"],
                        "https://github.com/you/workbook.git")
    assert not re.fullmatch(template["Parameters"]["RepositoryUrl"]["AllowedPattern"],
                            "git@github.com:you/workbook.git")
    # Or none, with a class bundle (docs/workshop-stack.md, "The class bundle"): the rule wants one.
    bundle = re.compile(template["Parameters"]["BundleUrl"]["AllowedPattern"])
    assert bundle.fullmatch("s3://class-bucket/class-bundle.tar.gz") and bundle.fullmatch("")
    assert not bundle.fullmatch("https://class-bucket.s3.amazonaws.com/class-bundle.tar.gz")
    assert template["Parameters"]["RepositoryUrl"]["Default"] == template["Parameters"]["BundleUrl"]["Default"] == ""
    (assertion,) = template["Rules"]["RepositoryOrBundle"]["Assertions"]
    assert assertion["Assert"] == {"Fn::Or": [{"Fn::Not": [{"Fn::Equals": [{"Ref": name}, ""]}]}
                                              for name in ("RepositoryUrl", "BundleUrl")]}


def test_each_lab_stops_on_shutdown_and_has_no_inbound_path(template):
    lab = lab_instance(template)
    assert lab["Properties"]["InstanceInitiatedShutdownBehavior"] == "stop"
    assert lab["Properties"]["MetadataOptions"] == {"HttpTokens": "required"}
    assert "CreationPolicy" not in lab  # the wait condition takes the signal (test_workshop_access)
    (interface,) = lab["Properties"]["NetworkInterfaces"]
    assert interface["GroupSet"] == [{"Ref": "LabSecurityGroup"}]
    egress = template["Resources"]["LabSecurityGroup"]["Properties"]["SecurityGroupEgress"]
    assert {(rule["IpProtocol"], rule["FromPort"], rule["ToPort"]) for rule in egress} == {
        ("tcp", 443, 443), ("tcp", 80, 80)}


def test_the_user_data_is_deploy_user_data_sh_after_a_header_of_its_values(template):
    header, body = embedded_user_data(template)
    assert body == USER_DATA.read_text(), "run: python -m deploy.template --sync"
    exported = set(re.findall(r"\b(LAB_[A-Z_]+)=", header))
    required = set(re.findall(r'"\$\{(LAB_[A-Z_]+)\??:?\?\}"', body))
    assert exported == required == {
        "LAB_STACK", "LAB_REGION", "LAB_RESOURCE", "LAB_SIGNAL_URL", "LAB_REPOSITORY_URL",
        "LAB_REPOSITORY_COMMIT", "LAB_CACHE_ARCHIVE", "LAB_IDLE_MINUTES", "LAB_TOKEN_PARAMETER",
        "LAB_BUNDLE"}
    assert "LAB_BUNDLE='${BundleUrl}'" in header
    # The signal goes to the lab's own handle, the token to the parameter its role may write.
    assert "LAB_SIGNAL_URL='${Lab${Seat}Signal}'" in header
    assert "LAB_REPOSITORY_COMMIT='${RepositoryCommit}'" in header
    assert "LAB_TOKEN_PARAMETER='${Lab${Seat}Token}'" in header  # the stack's own parameter


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
    # LearnerCount plus SpareSeats (0 to 4), never over 40: SeatCount holds the sum, under both keys.
    spares = template["Parameters"]["SpareSeats"]
    assert (spares["MinValue"], spares["MaxValue"]) == (0, 4)
    assert template["Mappings"]["SeatCount"] == {
        str(n): {str(k): str(n + k) for k in range(0, 5) if n + k <= 40} for n in range(1, 41)}
    identifier, collection, _ = template["Resources"]["Fn::ForEach::Labs"]
    assert (identifier, collection) == ("Seat", {"Fn::FindInMap": [
        "Seats", {"Fn::FindInMap": ["SeatCount", {"Ref": "LearnerCount"}, {"Ref": "SpareSeats"}]}, "Seats"]})
    assert template["Outputs"]["Fn::ForEach::LabOutputs"][:2] == [identifier, collection]


def test_each_learner_gets_the_command_that_opens_their_lab_in_either_shell(template):
    outputs = template["Outputs"]["Fn::ForEach::LabOutputs"][2]
    shell = outputs["Lab${Seat}Open"]["Value"]["Fn::Sub"]
    powershell = outputs["Lab${Seat}OpenPowerShell"]["Value"]["Fn::Sub"]
    for command in (shell, powershell):
        assert "--name /${AWS::StackName}/lab${Seat}/jupyter-token" in command
        assert "--target ${Lab${Seat}} --document-name AWS-StartPortForwardingSession" in command
        assert "http://127.0.0.1:8888/lab?token=$(aws ssm get-parameter" in command
    # JSON in single quotes for a POSIX shell (AWS's documented form); PowerShell gets the
    # shorthand in double quotes, which it passes whole (docs/sources.md).
    assert shell.endswith("""--parameters '{"portNumber":["8888"],"localPortNumber":["8888"]}'""")
    assert '" && aws ssm start-session' in shell and powershell.startswith("Write-Host ")
    assert powershell.endswith('--parameters "portNumber=8888,localPortNumber=8888"')
    assert '"; aws ssm start-session' in powershell and "\'" not in powershell
    assert set(outputs) == {"Lab${Seat}Instance", "Learner${Seat}Role", "Lab${Seat}Status", "Lab${Seat}Open",
                            "Lab${Seat}OpenPowerShell"}


def test_the_instructor_pages_costs_follow_from_the_cited_rates(template):
    page = (REPO_ROOT / "docs" / "workshop-stack.md").read_text()
    prices = json.loads((REPO_ROOT / "helpers" / "data" / "trn1_costs.json").read_text())["prices"]
    hourly = next(p["usd_per_hour"] for p in prices if p["instance"] == "trn1.2xlarge")
    gp3 = float(re.search(r'"\$(\d+\.\d+) per GB-month of General Purpose \(gp3\)', SOURCES).group(1))
    lab = lab_instance(template)
    size = lab["Properties"]["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"]
    assert f"${hourly:.2f} per learner-hour" in page
    assert f"${20 * 3 * hourly:.2f} for a 3-hour workshop" in page
    assert f"{size} × ${gp3:.2f} per GB-month = ${size * gp3:.2f} a month" in page
    assert f"about ${size * gp3 / 30:.2f} a day" in page and f"${20 * size * gp3 / 30:.0f} a day" in page
    # The interface endpoints: one per service the template lists, per zone, per hour.
    (_, services, _) = template["Resources"]["Fn::ForEach::Endpoints"]
    endpoint_hour = 0.01  # the page's stated assumption for us-east-1
    hourly_endpoints = len(services) * 2 * endpoint_hour
    assert f"{len(services)} endpoints × 2 zones × ${endpoint_hour:.2f} = ${hourly_endpoints:.2f} an hour" in page
    assert f"${hourly_endpoints * 24:.2f} a day" in page and f"${hourly_endpoints * 3:.2f} for the workshop" in page
    assert f"${hourly_endpoints / 20:.3f} per learner-hour, so a learner-hour stays ${hourly:.2f}" in page


SCANNER = REPO_ROOT / "build" / "scanner-venv" / "bin" / "checkov"
# The checks skipped in the template's Metadata, each with its reason beside it there.
SKIPPED = {"CKV_AWS_46", "CKV_AWS_111", "CKV_AWS_26"}


def checkov(*targets: Path) -> dict[str, dict]:
    """checkov's results for each target (by file name), from one run over all of them."""
    assert SCANNER.exists(), f"{SCANNER} is missing: run make scanner (make test runs it)"
    files = [arg for target in targets for arg in ("-f", str(target))]
    result = subprocess.run([str(SCANNER), *files, "--framework", "cloudformation",
                             "--skip-download", "-o", "json"], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode in (0, 1), result.stderr[-2000:]
    results = json.loads(result.stdout)["results"]
    return {target.name: {kind: [c for c in checks if Path(c["file_path"]).name == target.name]
                          for kind, checks in results.items() if isinstance(checks, list)}
            for target in targets}


def test_checkov_is_the_pinned_one():
    pinned = re.search(r"^checkov==(\S+)$", (REPO_ROOT / "requirements-scanner.txt").read_text(), re.M)
    assert pinned, "requirements-scanner.txt must pin checkov exactly"
    assert SCANNER.exists(), f"{SCANNER} is missing: run make scanner (make test runs it)"
    version = subprocess.run([str(SCANNER.parent / "python"), "-c", "import importlib.metadata as m; "
                              "print(m.version('checkov'))"], capture_output=True, text=True, timeout=60)
    assert version.stdout.strip() == pinned.group(1), version.stderr


@pytest.mark.e2e  # about 15 s: checkov, once over both
def test_checkov_passes_the_template_and_an_expanded_class(tmp_path):
    """checkov reads Fn::ForEach as written (it sees the shared resources only), so a class is
    scanned too, as tests/cfn_expand.py writes it out (with a cache archive and a reservation).
    Every seat's resources are the same but for their seat (tests/test_workshop_access.py): two
    seats show that, in a tenth of the time forty take."""
    from tests.test_workshop_access import CACHE, expand

    largest = expand(2, ClassroomCacheUrl=CACHE, CapacityReservationId="cr-0123456789abcdef0")
    expanded = tmp_path / "workshop-2.json"
    expanded.write_text(json.dumps({"AWSTemplateFormatVersion": "2010-09-09",
                                    "Resources": largest.resources}))
    by_file = checkov(TEMPLATE, expanded)
    for target, scanned in ((TEMPLATE, {"LabSecurityGroup", "LabLaunchTemplate"}),
                            (expanded, {"Lab02", "Lab02Role", "Learner02Role"})):
        results = by_file[target.name]
        failed = [(c["check_id"], c["resource"]) for c in results["failed_checks"]]
        assert failed == [], failed
        passed = {c["resource"].split(".")[-1] for c in results["passed_checks"]}
        assert scanned <= passed, (target, sorted(passed))
        for check in results["skipped_checks"]:
            assert check["check_id"] in SKIPPED and len(check["check_result"]["suppress_comment"]) > 40
    skipped = {(c["check_id"], c["resource"].split(".")[-1]) for c in results["skipped_checks"]}
    assert skipped == {(check, f"Lab{n:02d}{'Role' if check == 'CKV_AWS_111' else ''}")
                       for check in ("CKV_AWS_46", "CKV_AWS_111") for n in range(1, 3)} | {
        ("CKV_AWS_26", "DeniedCallsTopic")}
