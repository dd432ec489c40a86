"""The class bundle (deploy/bundle.py): what `make class-bundle` asks pip for, and an unpack
that checks the whole bundle against its manifest before anything lands. The boot from a real
bundle is tests/test_workshop_bootstrap.py's."""
from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from deploy.bundle import (
    MANIFEST_NAME,
    BundleError,
    bundle_manifest,
    download_command,
    lab_requirements,
    unpack,
    write_bundle,
)

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def test_pip_downloads_what_the_dlami_venv_lacks_for_its_python_as_wheels_only(tmp_path):
    wanted = lab_requirements()
    names = {w.split("==")[0].split(">=")[0] for w in wanted}
    assert not names & {"torch", "torch-xla", "torchvision"}  # the DLAMI venv's, never downloaded
    assert {"jupyterlab==4.6.6", "ipykernel==7.4.0", "setuptools>=64", "wheel", "awscli==1.46.3"} <= set(wanted)
    command = download_command(tmp_path)
    assert command[command.index("--python-version") + 1] == "3.12"
    assert "--only-binary=:all:" in command and command[command.index("--dest") + 1] == str(tmp_path)
    platforms = {command[i + 1] for i, arg in enumerate(command) if arg == "--platform"}
    assert "manylinux2014_x86_64" in platforms and all(p.endswith("x86_64") for p in platforms)


def small_bundle(tmp_path: Path, *, python="3.12", change=None, extra=None, drop=None) -> Path:
    """A bundle of three small members written by the bundle's own writer; change: a member
    whose bytes differ (same size) from those its manifest lists; extra: one it does not list;
    drop: one it lists, left out."""
    files = tmp_path / "files"
    (files / "wheels").mkdir(parents=True)
    members = []
    for name, data in (("repository.bundle", b"git bundle"), ("wheels/a-1-py3-none-any.whl", b"wheel"),
                       ("mnist/t10k-labels-idx1-ubyte", b"labels")):
        (files / name).parent.mkdir(parents=True, exist_ok=True)
        (files / name).write_bytes(data)
        members.append((files / name, name))
    manifest = bundle_manifest(COMMIT, python, members)
    if change:
        (files / change).write_bytes((files / change).read_bytes().upper())
    if extra:
        (files / extra).write_bytes(b"unlisted")
        members.append((files / extra, extra))
    archive = tmp_path / "class-bundle.tar.gz"
    write_bundle(archive, manifest, [m for m in members if m[1] != drop])
    return archive


def test_a_bundle_unpacks_whole_readable_by_the_lab_user(tmp_path):
    manifest = unpack(small_bundle(tmp_path), tmp_path / "bundle", COMMIT, python_version="3.12")
    dest = tmp_path / "bundle"
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()) == sorted(manifest["members"])
    assert (dest / "mnist" / "t10k-labels-idx1-ubyte").read_bytes() == b"labels"
    assert {p.stat().st_mode & 0o777 for p in dest.rglob("*")} == {0o644, 0o755}
    assert not list(tmp_path.glob(".class-bundle-*"))  # no staging left


@pytest.mark.parametrize("case, says", [
    ("changed", "wheels/a-1-py3-none-any.whl: 5 bytes, sha256"),
    ("unlisted", "extra.txt: in the bundle, not listed"),
    ("missing", "mnist/t10k-labels-idx1-ubyte: listed, not in the bundle"),
    ("another commit", f"it holds commit {COMMIT}, the stack names {'f' * 40}"),
    ("another python", "its wheels are for Python 3.11, this DLAMI venv's is 3.12"),
    ("a link", "could write outside the bundle or create links"),
    ("truncated", "is not a readable tar.gz, or is truncated"),
])
def test_a_bundle_that_contradicts_its_manifest_or_the_stack_is_refused_before_anything_lands(
        tmp_path, case, says):
    archive = small_bundle(tmp_path, python="3.11" if case == "another python" else "3.12",
                           change="wheels/a-1-py3-none-any.whl" if case == "changed" else None,
                           extra="extra.txt" if case == "unlisted" else None,
                           drop="mnist/t10k-labels-idx1-ubyte" if case == "missing" else None)
    if case == "a link":
        with tarfile.open(archive, "r:gz") as tar:
            manifest = tar.extractfile(MANIFEST_NAME).read()
        with tarfile.open(archive, "w:gz") as tar:
            info = tarfile.TarInfo(MANIFEST_NAME)
            info.size = len(manifest)
            tar.addfile(info, io.BytesIO(manifest))
            link = tarfile.TarInfo("wheels/a-1-py3-none-any.whl")
            link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(link)
    if case == "truncated":
        archive.write_bytes(archive.read_bytes()[:-40])
    with pytest.raises(BundleError) as refused:
        unpack(archive, tmp_path / "bundle", "f" * 40 if case == "another commit" else COMMIT,
               python_version="3.12")
    assert says in str(refused.value)
    assert not (tmp_path / "bundle").exists() and not list(tmp_path.glob(".class-bundle-*"))


def test_the_manifest_lists_each_member_with_its_size_and_sha256(tmp_path):
    with tarfile.open(small_bundle(tmp_path), "r:gz") as tar:
        first = tar.getmembers()[0]
        manifest = json.load(tar.extractfile(first))
    assert first.name == MANIFEST_NAME and manifest["commit"] == COMMIT
    assert manifest["members"]["repository.bundle"] == {
        "size": 10, "sha256": hashlib.sha256(b"git bundle").hexdigest()}
    assert manifest["total_bytes"] == 10 + 5 + 6
