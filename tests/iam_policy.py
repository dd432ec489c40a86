"""A small IAM policy evaluator, written from AWS's documented evaluation logic for one account
(IAM User Guide, "Policy evaluation logic"; docs/sources.md), for the identity-based and trust
policies of the workshop stack:

- a request is denied unless a statement allows it, and an explicit Deny in any statement wins;
- a statement applies when its Action (or NotAction) matches the action, case-insensitively with
  `*` and `?` wildcards; its Resource (or NotResource) matches the resource ARN, case-sensitively
  with the same wildcards, after policy variables (`${aws:userid}` ...) are replaced from the
  request context (a variable the context lacks makes that resource string match nothing); and
  every condition holds;
- conditions: each operator's keys must all hold (AND); a key holds when its context value
  matches any listed value (OR); a key missing from the context fails the operator, except for the
  ...IfExists forms; operators StringEquals, StringNotEquals, StringLike, StringNotLike,
  StringEqualsIgnoreCase, ArnEquals, ArnLike, Bool (each also ...IfExists).

Anything else in a statement (Principal in an identity policy, an operator not listed, a set
operator) raises: the tests must not read a policy this model does not cover.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

OPERATORS = {"StringEquals", "StringNotEquals", "StringLike", "StringNotLike",
             "StringEqualsIgnoreCase", "ArnEquals", "ArnLike", "Bool"}


@dataclass(frozen=True)
class Request:
    action: str
    resource: str
    context: dict = field(default_factory=dict)  # condition keys and policy variables
    principal: str | None = None  # for trust policies: the calling principal's ARN


def wildcard(pattern: str, text: str, ignore_case: bool = False) -> bool:
    """IAM's `*` (any run of characters, also none) and `?` (one character); nothing else special."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, text, re.IGNORECASE if ignore_case else 0) is not None


def substitute(text: str, context: dict) -> str | None:
    """Policy variables replaced; None when one has no value in the context."""
    missing = False

    def one(match):
        nonlocal missing
        name = match.group(1)
        if name in ("*", "?", "$"):
            return name
        if name not in context:
            missing = True
            return ""
        return str(context[name])
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
    if_exists = operator.endswith("IfExists")
    base = operator.removesuffix("IfExists")
    if base not in OPERATORS or ":" in base:
        raise NotImplementedError(f"condition operator {operator} is not modelled")
    if key not in context:
        return if_exists
    actual = str(context[key])
    values = [substitute(str(v), context) for v in _listed(wanted)]
    values = [v for v in values if v is not None]
    if base in ("StringEquals", "ArnEquals"):
        return actual in values
    if base == "StringEqualsIgnoreCase":
        return actual.lower() in (v.lower() for v in values)
    if base == "StringNotEquals":
        return actual not in values
    if base in ("StringLike", "ArnLike"):
        return any(wildcard(v, actual) for v in values)
    if base == "StringNotLike":
        return not any(wildcard(v, actual) for v in values)
    return actual.lower() in (v.lower() for v in values)  # Bool


def statement_applies(statement: dict, request: Request, trust: bool = False) -> bool:
    known = {"Sid", "Effect", "Action", "NotAction", "Resource", "NotResource", "Condition"}
    known |= {"Principal"} if trust else set()
    unknown = set(statement) - known
    if unknown:
        raise NotImplementedError(f"statement keys {sorted(unknown)} are not modelled")
    if "Action" in statement:
        if not any(wildcard(a, request.action, True) for a in _listed(statement["Action"])):
            return False
    elif not statement.get("NotAction") or any(
            wildcard(a, request.action, True) for a in _listed(statement["NotAction"])):
        return False
    if trust:
        if not _principal_matches(statement.get("Principal"), request.principal):
            return False
    elif "Resource" in statement:
        if not _matches_any(statement["Resource"], request.resource, request.context):
            return False
    elif not statement.get("NotResource") or _matches_any(
            statement["NotResource"], request.resource, request.context):
        return False
    for operator, keys in statement.get("Condition", {}).items():
        for key, wanted in keys.items():
            if not _condition_holds(operator, key, wanted, request.context):
                return False
    return True


def _principal_matches(principal, caller: str | None) -> bool:
    if caller is None or not isinstance(principal, dict) or set(principal) - {"AWS"}:
        raise NotImplementedError(f"principal {principal!r} is not modelled")
    return any(p == caller for p in _listed(principal["AWS"]))


def decide(policies: list[dict], request: Request, trust: bool = False) -> str:
    """"Allow", "ExplicitDeny" or "ImplicitDeny" for the request under these policy documents."""
    allowed = False
    for policy in policies:
        for statement in _listed(policy["Statement"]):
            if statement_applies(statement, request, trust):
                if statement["Effect"] == "Deny":
                    return "ExplicitDeny"
                allowed = allowed or statement["Effect"] == "Allow"
    return "Allow" if allowed else "ImplicitDeny"


def allows(policies: list[dict], request: Request, trust: bool = False) -> bool:
    return decide(policies, request, trust) == "Allow"


def actions_granted(policies: list[dict]) -> set[str]:
    """Every Action string the Allow statements name (NotAction is refused above)."""
    return {a for p in policies for s in _listed(p["Statement"]) if s["Effect"] == "Allow"
            for a in _listed(s.get("Action", []))}
