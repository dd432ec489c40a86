"""A small IAM policy evaluator, written from AWS's documented evaluation logic for one account
(IAM User Guide: "Policy evaluation logic", "IAM JSON policy elements: Condition", "Condition
operators", "Policy variables"; docs/workshop-stack.md cites each), for the identity-based and trust
policies of the workshop stack. It fails closed: whatever it does not model raises PolicyNotModelled,
so a test never reads a policy it would read wrongly.

- A request is denied unless a statement allows it; an explicit Deny in any statement wins.
- A statement applies when its Action matches the action (case-insensitively, `*` and `?`
  wildcards), its Resource matches the resource ARN (case-sensitively, the same wildcards, after
  policy variables such as `${aws:userid}` are filled from the request context; a variable the
  context lacks makes that resource string match nothing) and every condition holds.
- Conditions: each operator's keys must all hold (AND); a key holds when its value matches any
  listed value (OR). Condition key names compare case-insensitively ("Context key names are not
  case-sensitive"). A key absent from the request context fails a positive operator and passes a
  negated one (StringNotEquals, StringNotLike, ArnNotEquals, ArnNotLike, ...: nothing in the
  request equals the value, so "not equal" holds); the ...IfExists forms pass on an absent key.
  `Null` is true for a key that is absent and false for one that is present. A policy variable in
  a condition value that the context lacks is a value nothing equals.
- Operators: StringEquals, StringNotEquals, StringEqualsIgnoreCase, StringNotEqualsIgnoreCase,
  StringLike, StringNotLike, ArnEquals, ArnNotEquals, ArnLike, ArnNotLike, Bool (each also
  ...IfExists), and Null.

Refused (PolicyNotModelled): NotAction, NotResource and NotPrincipal (each inverts a match, so a
gap in this model would become a grant); a Principal that is anything but a list of exact IAM user
or role ARNs or a list of exact service names (`"*"`, an account, an account's `:root`, a
wildcard, a federated principal, users and services mixed in one Principal); set operators (ForAnyValue:, ForAllValues:); any other operator; any other statement
key.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

NEGATED = {"StringNotEquals", "StringNotEqualsIgnoreCase", "StringNotLike", "ArnNotEquals",
           "ArnNotLike"}
POSITIVE = {"StringEquals", "StringEqualsIgnoreCase", "StringLike", "ArnEquals", "ArnLike", "Bool"}
# An exact IAM user or role ARN: no wildcard, no account root (the only principals the model reads).
EXACT_PRINCIPAL = re.compile(r"arn:aws[a-z-]*:iam::[0-9]{12}:(user|role)/[A-Za-z0-9+=,.@_/-]+")
# A service principal named exactly (a service's own name, such as ec2.amazonaws.com): it matches
# that service and no user or role.
SERVICE_PRINCIPAL = re.compile(r"[a-z0-9-]+(\.[a-z0-9-]+)*\.amazonaws\.com")


class PolicyNotModelled(ValueError):
    """The policy uses something this evaluator does not model: the test must not read it."""


@dataclass(frozen=True)
class Request:
    action: str
    resource: str
    context: dict = field(default_factory=dict)  # condition keys and policy variables
    principal: str | None = None  # for trust policies: the calling principal's ARN


@lru_cache(maxsize=4096)
def _compiled(pattern: str, ignore_case: bool) -> re.Pattern:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(regex, re.IGNORECASE | re.DOTALL if ignore_case else re.DOTALL)


def wildcard(pattern: str, text: str, ignore_case: bool = False) -> bool:
    """IAM's `*` (any run of characters, also none) and `?` (one character); nothing else special."""
    return _compiled(pattern, ignore_case).fullmatch(text) is not None


def _lowered(context: dict) -> dict:
    return {str(k).lower(): v for k, v in context.items()}


def substitute(text: str, context: dict) -> str | None:
    """Policy variables replaced (their names case-insensitively); None when one has no value."""
    missing = False
    lowered = _lowered(context)

    def one(match):
        nonlocal missing
        name = match.group(1)
        if name in ("*", "?", "$"):
            return name
        if name.lower() not in lowered:
            missing = True
            return ""
        return str(lowered[name.lower()])
    result = re.sub(r"\$\{([^}]+)\}", one, text)
    return None if missing else result


def _listed(value) -> list:
    return value if isinstance(value, list) else [value]


def _matches_any(patterns, text: str, context: dict, ignore_case: bool = False) -> bool:
    for pattern in _listed(patterns):
        filled = substitute(pattern, context)
        if filled is not None and wildcard(filled, text, ignore_case):
            return True
    return False


def _condition_holds(operator: str, key: str, wanted, context: dict) -> bool:
    if operator == "Null":
        present = key.lower() in _lowered(context)
        (flag,) = {str(v).lower() for v in _listed(wanted)}
        if flag not in ("true", "false"):
            raise PolicyNotModelled(f"Null takes true or false, not {wanted!r}")
        return present != (flag == "true")
    if_exists = operator.endswith("IfExists")
    base = operator.removesuffix("IfExists")
    if base not in NEGATED | POSITIVE:
        raise PolicyNotModelled(f"condition operator {operator} is not modelled")
    lowered = _lowered(context)
    if key.lower() not in lowered:
        return if_exists or base in NEGATED
    actual = str(lowered[key.lower()])
    values = [substitute(str(v), context) for v in _listed(wanted)]
    values = [v for v in values if v is not None]  # a missing variable equals nothing
    if base in ("StringEquals", "ArnEquals"):
        matched = actual in values
    elif base in ("StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase", "Bool"):
        matched = actual.lower() in (v.lower() for v in values)
    elif base in ("StringLike", "ArnLike", "StringNotLike", "ArnNotLike"):
        matched = any(wildcard(v, actual) for v in values)
    else:  # StringNotEquals, ArnNotEquals
        matched = actual in values
    return not matched if base in NEGATED else matched


def statement_applies(statement: dict, request: Request, trust: bool = False) -> bool:
    inverted = {"NotAction", "NotResource", "NotPrincipal"} & set(statement)
    if inverted:
        raise PolicyNotModelled(f"{sorted(inverted)} in {statement.get('Sid', statement)!r}: "
                                "an inverted match is refused")
    known = {"Sid", "Effect", "Action", "Resource", "Condition"} | ({"Principal"} if trust else set())
    unknown = set(statement) - known
    if unknown or statement.get("Effect") not in ("Allow", "Deny") or "Action" not in statement:
        raise PolicyNotModelled(f"statement {statement!r} is not modelled")
    if not any(wildcard(a, request.action, True) for a in _listed(statement["Action"])):
        return False
    if trust:
        if not _principal_matches(statement.get("Principal"), request.principal):
            return False
    elif "Resource" not in statement:
        raise PolicyNotModelled(f"statement {statement!r} names no Resource")
    elif not _matches_any(statement["Resource"], request.resource, request.context):
        return False
    for operator, keys in statement.get("Condition", {}).items():
        for key, wanted in keys.items():
            if not _condition_holds(operator, key, wanted, request.context):
                return False
    return True


def _principal_matches(principal, caller: str | None) -> bool:
    if caller is None or not isinstance(principal, dict) or set(principal) not in ({"AWS"}, {"Service"}):
        raise PolicyNotModelled(f"principal {principal!r} is not modelled")
    ((kind, listed),) = principal.items()
    listed = _listed(listed)
    exact = EXACT_PRINCIPAL if kind == "AWS" else SERVICE_PRINCIPAL
    for name in listed:
        if not isinstance(name, str) or not exact.fullmatch(name):
            raise PolicyNotModelled(f"principal {name!r} is not an exact IAM user or role ARN "
                                    "or service name")
    return caller in listed


def decide(policies: list[dict], request: Request, trust: bool = False) -> str:
    """"Allow", "ExplicitDeny" or "ImplicitDeny" for the request under these policy documents."""
    allowed = False
    for policy in policies:
        for statement in _listed(policy["Statement"]):
            if statement_applies(statement, request, trust):
                if statement["Effect"] == "Deny":
                    return "ExplicitDeny"
                allowed = True
    return "Allow" if allowed else "ImplicitDeny"


def allows(policies: list[dict], request: Request, trust: bool = False) -> bool:
    return decide(policies, request, trust) == "Allow"


def actions_granted(policies: list[dict]) -> set[str]:
    """Every Action string the Allow statements name; NotAction anywhere is refused."""
    granted = set()
    for policy in policies:
        for statement in _listed(policy["Statement"]):
            if "NotAction" in statement:
                raise PolicyNotModelled(f"NotAction in {statement.get('Sid', statement)!r}")
            if statement["Effect"] == "Allow":
                granted |= set(_listed(statement.get("Action", [])))
    return granted
