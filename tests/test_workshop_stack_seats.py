"""Every seat of the largest class is seat 01 with its number replaced: the resources Fn::ForEach
writes for seat NN (its roles and their policies, trust policies, instance, token parameter, wait
condition) and its outputs, expanded (tests/cfn_expand.py), equal seat 01's once seat 01's
identifiers (its resources' physical ids, "lab01", "learner01", its tag) are replaced by seat NN's.
So no seat names another seat, and what tests/test_workshop_access.py shows for every pair of
seats in a class of three holds for forty."""
from __future__ import annotations

import json
import re

from deploy.template import lab_resources
from tests.test_workshop_access import largest_class, seats, template

# What differs between seats by design: the subnet, (NN - 1) mod K of the K given.
SPREAD = ("SubnetId",)


def seat_text(stack, seat: str) -> str:
    """Seat `seat`'s resources (minus the subnet) and outputs, as JSON."""
    resources = {}
    for pattern in lab_resources(template()):
        logical = pattern.replace("${Seat}", seat)
        resource = json.loads(json.dumps(stack.resources[logical]))
        for interface in resource.get("Properties", {}).get("NetworkInterfaces", []):
            for key in SPREAD:
                interface.pop(key)
        resources[logical] = resource
    outputs = {k: v for k, v in stack.outputs.items() if re.search(rf"(Lab|Learner){seat}[A-Z]", k)}
    assert len(outputs) == 5, outputs
    return json.dumps({"resources": resources, "outputs": outputs}, sort_keys=True)


def as_seat(stack, text: str, seat: str) -> str:
    """Seat 01's text with seat `seat`'s identifiers in place of its own."""
    for pattern in lab_resources(template()):
        ours, theirs = pattern.replace("${Seat}", "01"), pattern.replace("${Seat}", seat)
        text = text.replace(stack.ref(ours), stack.ref(theirs))
    for word in ("Lab", "lab", "Learner", "learner", "lab ", "learner "):
        text = text.replace(f"{word}01", f"{word}{seat}")
    text = text.replace('"workshop-seat": "01"', f'"workshop-seat": "{seat}"')  # the token's tag
    # the lab role's association poll, which names its own instance by the instance's tag
    text = text.replace('"aws:ResourceTag/workshop-seat": "01"', f'"aws:ResourceTag/workshop-seat": "{seat}"')
    return text.replace('"Key": "workshop-seat", "Value": "01"',  # the instance's
                        f'"Key": "workshop-seat", "Value": "{seat}"')


def test_seat_nn_is_seat_01_with_its_number_replaced():
    stack = largest_class()
    first = seat_text(stack, "01")
    assert "lab01" in first and "learner01" in first and stack.ref("Lab01") in first
    for seat in seats(stack)[1:]:
        assert seat_text(stack, seat) == as_seat(stack, first, seat), seat
    # The comparison sees a difference: seat 02 naming seat 03's token is not seat 01's text.
    wrong = seat_text(stack, "02").replace("/lab02/jupyter-token", "/lab03/jupyter-token")
    assert wrong != as_seat(stack, first, "02")
