"""A class stack survives a stack update: decided as CloudFormation decides it, from the
resource schemas cfn-lint ships (the CloudFormation registry's schemas: a change to a property
listed in createOnlyProperties, or in conditionalCreateOnlyProperties while the update method
replaces, replaces the resource; a resource with a name of its own cannot be replaced, and the
update fails). On the expanded template (tests/cfn_expand.py) for 3 and 40 seats: changing
SessionIdleMinutes or SessionMaxMinutes replaces nothing; growing a class touches no lab that
exists; and a token parameter an update rewrites gets its lab's token back (deploy/publish_token.sh,
run here against a stand-in for the AWS CLI)."""
from __future__ import annotations

import copy
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.template import lab_resources
from tests.cfn_expand import REGION, Stack
from tests.test_workshop_access import CACHE, expand, largest_class, template

PUBLISH = Path(__file__).resolve().parent.parent / "deploy" / "publish_token.sh"
# The property that gives each resource type a name of its own (AWS::SSM::Parameter: Name, ...).
NAMED_BY = {"AWS::SSM::Document": "Name", "AWS::SSM::Parameter": "Name", "AWS::IAM::Role": "RoleName",
            "AWS::IAM::ManagedPolicy": "ManagedPolicyName", "AWS::IAM::InstanceProfile": "InstanceProfileName",
            "AWS::Events::Rule": "Name", "AWS::SNS::Topic": "TopicName", "AWS::EC2::SecurityGroup": "GroupName"}


@functools.lru_cache(maxsize=None)
def schema(resource_type: str) -> dict:
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

    return PROVIDER_SCHEMA_MANAGER.get_resource_schema(REGION, resource_type).schema


def value_at(properties: dict, pointer: str):
    """The value at a schema's JSON pointer (/properties/A/B), or None where there is none."""
    value = properties
    for part in pointer.split("/")[2:]:
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def replaced_by_update(before: Stack, after: Stack) -> dict[str, list[str]]:
    """Each resource present in both that the update would replace, with the create-only
    properties that changed."""
    replaced = {}
    for logical_id, old in before.resources.items():
        new = after.resources.get(logical_id)
        if new is None:
            continue
        assert new["Type"] == old["Type"], logical_id
        rules = schema(old["Type"])
        create_only = list(rules.get("createOnlyProperties", []))
        # AWS::SSM::Document: its content and the like are create-only while UpdateMethod is
        # Replace, the schema's default (its description of UpdateMethod).
        method = new["Properties"].get("UpdateMethod", rules["properties"].get("UpdateMethod", {}).get("default"))
        if method == "Replace":
            create_only += rules.get("conditionalCreateOnlyProperties", [])
        changed = [p for p in create_only if value_at(old["Properties"], p) != value_at(new["Properties"], p)]
        if changed:
            replaced[logical_id] = changed
    return replaced


def updated(before: Stack, after: Stack) -> set[str]:
    """The resources the update touches at all (any property changed)."""
    return {k for k, v in before.resources.items()
            if k in after.resources and after.resources[k]["Properties"] != v["Properties"]}


def named_replacements(before: Stack, after: Stack) -> list[str]:
    """Replacements CloudFormation refuses: of a resource with a name of its own."""
    return [k for k in replaced_by_update(before, after)
            if NAMED_BY.get(before.resources[k]["Type"]) in before.resources[k]["Properties"]]


@functools.lru_cache(maxsize=None)
def class_of(seats: int, **changes) -> Stack:
    return largest_class() if seats == 40 and not changes else expand(seats, ClassroomCacheUrl=CACHE, **changes)


@pytest.mark.parametrize("seats", [3, 40])
def test_changing_the_session_preferences_replaces_nothing(seats):
    before = class_of(seats)
    for change in ({"SessionIdleMinutes": "45"}, {"SessionMaxMinutes": "120"}):
        after = expand(seats, ClassroomCacheUrl=CACHE, **change)
        assert updated(before, after) == {"SessionPreferences"}, change
        assert replaced_by_update(before, after) == {}, change


def test_the_preferences_document_would_be_replaced_by_its_default_update_method():
    """The check sees the failure the issue describes: with UpdateMethod left at its default
    (Replace) the document's new content replaces it, and it has a name of its own."""
    mutated = copy.deepcopy(template())
    del mutated["Resources"]["SessionPreferences"]["Properties"]["UpdateMethod"]
    parameters = expand(3).parameters
    before = Stack(mutated, parameters)
    after = Stack(mutated, {**parameters, "SessionIdleMinutes": "45"})
    assert replaced_by_update(before, after) == {"SessionPreferences": ["/properties/Content"]}
    assert named_replacements(before, after) == ["SessionPreferences"]
    assert schema("AWS::SSM::Document")["properties"]["UpdateMethod"]["default"] == "Replace"


@pytest.mark.parametrize("seats", [3, 40])
def test_no_parameter_update_rewrites_a_token_or_replaces_a_named_resource(seats):
    """Each parameter a class may change between mornings: no token parameter is touched (its
    placeholder stays unwritten), no resource with a name of its own is replaced."""
    before = class_of(seats)
    for change in ({"IdleMinutes": "90"}, {"SessionIdleMinutes": "45"}, {"ClassroomCacheUrl": ""},
                   {"ClassroomCacheUrl": "s3://class-bucket/classroom-cache-2.tar.gz"},
                   {"InstanceType": "trn1.32xlarge"}):
        after = expand(seats, **{"ClassroomCacheUrl": CACHE, **change})
        touched = updated(before, after)
        assert not any(k.endswith("Token") for k in touched), (change, sorted(touched))
        assert named_replacements(before, after) == [], change


def test_growing_a_class_from_3_to_40_touches_no_lab_that_exists():
    before, after = class_of(3), class_of(40)
    assert updated(before, after) == set() and replaced_by_update(before, after) == {}
    assert set(before.resources) < set(after.resources)


def test_every_seat_resource_type_has_a_schema():
    """The decision rests on the schemas: every type the stack makes has one, with its lists."""
    types = {r["Type"] for r in largest_class().resources.values()}
    types |= {r["Type"] for r in lab_resources(template()).values()}
    for resource_type in types:
        assert "properties" in schema(resource_type), resource_type
    assert "/properties/Name" in schema("AWS::SSM::Parameter")["createOnlyProperties"]
    assert "/properties/Content" in schema("AWS::SSM::Document")["conditionalCreateOnlyProperties"]


AWS_STAND_IN = """#!{python}
import json, os, sys
args = sys.argv[1:]
state = os.environ["PARAMETER_STATE"]
with open(os.environ["AWS_CALLS"], "a") as calls:
    calls.write(json.dumps(args) + "\\n")
if args[:2] == ["ssm", "get-parameter"]:
    print(open(state).read())
elif args[:2] == ["ssm", "put-parameter"]:
    open(state, "w").write(args[args.index("--value") + 1])
else:
    sys.exit("unexpected call: " + " ".join(args))
"""


@pytest.mark.parametrize("seats", [3, 40])
def test_a_token_an_update_rewrote_is_put_back_by_its_lab(tmp_path, seats):
    """A template update that changes a token parameter (its description here) updates it in
    place, writing the template's placeholder; the lab's workshop-token timer runs
    deploy/publish_token.sh, which puts the lab's token back, and leaves a live token alone."""
    before = class_of(seats)
    edited = copy.deepcopy(template())
    fragment = edited["Resources"]["Fn::ForEach::Labs"][2]
    fragment["Lab${Seat}Token"]["Properties"]["Description"] = "JupyterLab token, reworded"
    after = Stack(edited, before.parameters)
    seat = f"{seats:02d}"
    assert f"Lab{seat}Token" in updated(before, after)
    assert f"Lab{seat}Token" not in replaced_by_update(before, after)
    placeholder = after.resources[f"Lab{seat}Token"]["Properties"]["Value"]
    name = after.resources[f"Lab{seat}Token"]["Properties"]["Name"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "aws").write_text(AWS_STAND_IN.format(python=sys.executable))
    (bin_dir / "aws").chmod(0o755)
    state, calls = tmp_path / "parameter", tmp_path / "calls.jsonl"
    state.write_text(placeholder)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PARAMETER_STATE": str(state),
           "AWS_CALLS": str(calls), "JUPYTER_TOKEN": "a" * 48, "LAB_TOKEN_PARAMETER": name,
           "LAB_REGION": REGION}
    for _ in range(2):  # the placeholder is replaced; the next run finds the token and writes nothing
        result = subprocess.run(["bash", str(PUBLISH)], env=env, capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, result.stderr
    assert state.read_text() == "a" * 48
    made = [json.loads(line) for line in calls.read_text().splitlines()]
    assert [c[:2] for c in made] == [["ssm", "get-parameter"], ["ssm", "put-parameter"], ["ssm", "get-parameter"]]
    assert made[1] == ["ssm", "put-parameter", "--region", REGION, "--name", name, "--type", "String",
                       "--overwrite", "--value", "a" * 48]


def test_the_lab_runs_the_token_check_every_5_minutes_as_root_from_the_commits_copy():
    bootstrap = (PUBLISH.parent / "bootstrap.sh").read_text()
    assert "ExecStart=/bin/bash $LAB_IDLE_DIR/deploy/publish_token.sh" in bootstrap
    assert "OnUnitActiveSec=5min" in bootstrap and "systemctl enable --now workshop-token.timer" in bootstrap
    # The first publication goes through the same script.
    assert 'bash "$LAB_IDLE_DIR/deploy/publish_token.sh"' in bootstrap
    assert bootstrap.count("put-parameter") == 0
