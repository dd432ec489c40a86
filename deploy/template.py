"""deploy/workshop.yaml as data, and the one copy of deploy/user_data.sh inside it.

`python -m deploy.template --sync` rewrites the user data embedded in the template from
deploy/user_data.sh (CloudFormation has no include: the template must carry the script itself);
tests/test_workshop_stack.py fails while the two differ. The template is read with cfn-lint's
loader, which knows the short forms (!Ref, !Sub, ...).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEPLOY = Path(__file__).resolve().parent
TEMPLATE = DEPLOY / "workshop.yaml"
USER_DATA = DEPLOY / "user_data.sh"
# The line that opens the embedded copy; the copy is every following line indented deeper.
EMBED_MARKER = "- |  # deploy/user_data.sh, unchanged (python -m deploy.template --sync)"
EMBED_INDENT = " " * 22
LABS_LOOP = "Fn::ForEach::Labs"


def load(path: Path = TEMPLATE) -> dict:
    """The template as nested dicts and lists, short-form functions as {"Fn::...": ...}."""
    from cfnlint.decode import decode

    template, problems = decode(str(path))
    if problems:
        raise ValueError(f"{path} cannot be read: {'; '.join(str(p) for p in problems)}")
    return template


def lab_resources(template: dict) -> dict[str, dict]:
    """The resources Fn::ForEach::Labs writes once per seat, by their logical id pattern."""
    _identifier, _collection, fragment = template["Resources"][LABS_LOOP]
    return dict(fragment)


def lab_instance(template: dict) -> dict:
    """The one instance a seat has, as written inside Fn::ForEach::Labs."""
    (lab,) = [r for r in lab_resources(template).values() if r["Type"] == "AWS::EC2::Instance"]
    return lab


def embedded_user_data(template: dict) -> tuple[str, str]:
    """(the header the stack fills in with Fn::Sub, the script that follows it) of a lab."""
    lab = lab_instance(template)
    header, body = lab["Properties"]["UserData"]["Fn::Base64"]["Fn::Join"][1]
    return header["Fn::Sub"], body


def synced_text(template_text: str, user_data: str) -> str:
    lines = template_text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.strip() == EMBED_MARKER) + 1
    end = start
    while end < len(lines) and (lines[end].startswith(EMBED_INDENT) or not lines[end].strip()):
        end += 1
    while end > start and not lines[end - 1].strip():
        end -= 1  # blank lines after the script belong to the template
    copy = [EMBED_INDENT + line if line.strip() else "\n"
            for line in user_data.splitlines(keepends=True)]
    return "".join(lines[:start] + copy + lines[end:])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.template", description=__doc__.split("\n")[0])
    parser.add_argument("--sync", action="store_true", help="copy deploy/user_data.sh into the template")
    args = parser.parse_args(argv)
    text = TEMPLATE.read_text()
    synced = synced_text(text, USER_DATA.read_text())
    if args.sync:
        if synced != text:
            TEMPLATE.write_text(synced)
        print(f"{TEMPLATE.name}: user data {'updated' if synced != text else 'already current'}")
        return 0
    print(f"{TEMPLATE.name}: user data {'current' if synced == text else 'differs: run with --sync'}")
    return 0 if synced == text else 1


if __name__ == "__main__":
    sys.exit(main())
