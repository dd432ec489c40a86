"""The class bundle: everything a workshop lab fetches from outside, in one S3 object
(docs/workshop-stack.md, "The class bundle").

    python -m deploy.bundle make build/class-bundle.tar.gz [--commit REV] [--cache ARCHIVE]
    python -m deploy.bundle unpack BUNDLE DIR --commit SHA      (what a lab's first boot runs)

A tar.gz whose first member, class-bundle-manifest.json, names every other member with its size
and sha256: the commit as a git bundle, MNIST, the wheels the DLAMI venv lacks, and the classroom
cache archive when given. Unpacking checks it whole before anything lands in DIR. Unpacking needs
the standard library only: a lab runs it with the DLAMI venv's python, before the workbook's venv
exists.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from helpers.cache.safe_tar import READ_ERRORS, check_archive

REPO_ROOT = Path(__file__).resolve().parents[1]
MANIFEST_NAME = "class-bundle-manifest.json"
MANIFEST_FORMAT = "trainium-workbook/class-bundle/1"
REPOSITORY = "repository.bundle"
CACHE = "classroom-cache.tar.gz"
MNIST, WHEELS = "mnist", "wheels"
# The branch the git bundle carries (a bundle needs a ref): the lab checks out the commit itself.
BUNDLE_REF = "refs/heads/class"
# The Neuron 2.31 PyTorch 2.9 DLAMI is Ubuntu 24.04, whose python3 is 3.12 (the DLAMI venv is made
# from it); the boot checks the bundle's Python against the DLAMI venv's before using a wheel.
DLAMI_PYTHON = "3.12"
# pip download's platforms for a trn1 with Ubuntu 24.04's glibc 2.39: pip takes each literally, so
# every manylinux_2_Y is named (xprof 2.24.2 ships only manylinux_2_27).
DLAMI_PLATFORMS = [f"manylinux_2_{y}_x86_64" for y in range(39, 16, -1)] + ["manylinux2014_x86_64", "linux_x86_64"]
# What the DLAMI venv holds already (helpers/setup/venv_plan.py's STACK, the part in requirements.txt).
DLAMI_STACK = {"torch", "torch-xla", "torchvision"}
CHUNK = 1024 * 1024


class BundleError(Exception):
    """The bundle cannot be made or unpacked: the message says why and what to do."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


# ---- what goes in

def awscli_requirement(user_data: Path = REPO_ROOT / "deploy" / "user_data.sh") -> str:
    """The AWS CLI pin the boot installs where the image lacks one (its one home: user_data.sh)."""
    m = re.search(r'^AWSCLI_REQUIREMENT="([^"]+)"$', user_data.read_text(), re.M)
    if not m:
        raise BundleError(f"{user_data} names no AWSCLI_REQUIREMENT")
    return m.group(1)


def build_requirements(pyproject: Path = REPO_ROOT / "pyproject.toml") -> list[str]:
    """What `pip install -e .` builds with: setuptools as pyproject.toml's [build-system] requires
    it, and wheel, which a setuptools before 70.1 asks for. pip's isolated build still sees the
    packages of the DLAMI venv the workbook's venv is layered on, so an older setuptools there may
    be the one that builds (it is, on the stand-in's simulated DLAMI)."""
    m = re.search(r'^requires = \["([^"]+)"\]$', pyproject.read_text(), re.M)
    if not m:
        raise BundleError(f"{pyproject} has no one-line [build-system] requires")
    return [m.group(1), "wheel"]


def lab_requirements(repo: Path = REPO_ROOT) -> list[str]:
    """What pip installs on a lab beyond the DLAMI venv: requirements.txt without the stack the
    DLAMI venv holds, the build backend, and the AWS CLI."""
    wanted = []
    for line in (repo / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        name = re.split(r"[=<>!~;\[ ]", line, maxsplit=1)[0]
        if line and re.sub(r"[-_.]+", "-", name).lower() not in DLAMI_STACK:
            wanted.append(line)
    return wanted + build_requirements(repo / "pyproject.toml") + [awscli_requirement(repo / "deploy" / "user_data.sh")]


def download_command(dest: Path, python_version: str = DLAMI_PYTHON, requirements: list[str] | None = None,
                     repo: Path = REPO_ROOT) -> list[str]:
    """pip download of the lab's wheels (lab_requirements, unless given) for the DLAMI's Python and
    platform: binary wheels only (a lab builds nothing)."""
    platforms = [arg for p in DLAMI_PLATFORMS for arg in ("--platform", p)]
    return [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--dest", str(dest),
            "--only-binary=:all:", "--python-version", python_version, "--implementation", "cp",
            *platforms, *(lab_requirements(repo) if requirements is None else requirements)]


def git_bundle(repo: Path, commit: str, dest: Path) -> str:
    """A git bundle of `commit` (any revision of repo) at dest; returns the full commit id."""
    def git(*args, cwd=repo):
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
        if done.returncode:
            raise BundleError(f"git {' '.join(args)} failed in {cwd}: {done.stderr.strip()}")
        return done.stdout.strip()
    full = git("rev-parse", "--verify", f"{commit}^{{commit}}")
    with tempfile.TemporaryDirectory() as scratch:  # a ref of its own, outside the user's repository
        git("init", "-q", "--bare", scratch, cwd=None)
        git("fetch", "-q", str(Path(repo).resolve()), f"{full}:{BUNDLE_REF}", cwd=scratch)
        git("bundle", "create", "-q", str(dest), BUNDLE_REF, cwd=scratch)
    return full


def mnist_files(data_dir: Path) -> list[Path]:
    """The four IDX files, md5-checked where `make data` put them."""
    from mnist_mlp.common.mnist_files import IDX_MD5, mnist_file_problems, raw_dir

    problems = mnist_file_problems(data_dir)
    if problems:
        raise BundleError(f"MNIST in {data_dir} is not right ({problems}): run `make data` first")
    return [raw_dir(data_dir) / name for name in IDX_MD5]


def make_bundle(archive, *, repo=REPO_ROOT, commit="HEAD", data_dir=None, wheels: Path,
                cache: Path | None = None, python_version: str = DLAMI_PYTHON) -> dict:
    """Write the bundle to archive (atomically: a failure leaves none); returns its manifest.
    wheels: a directory of the wheels the lab installs (download_command fills one)."""
    from mnist_mlp.common.mnist_files import resolve_data_dir

    archive = Path(archive).absolute()
    if not (wheel_files := sorted(Path(wheels).glob("*.whl"))):
        raise BundleError(f"no wheels in {wheels}: a lab with no way out could not install its packages")
    if cache is not None and not Path(cache).is_file():
        raise BundleError(f"no classroom cache archive at {cache}: `make classroom-cache` writes one")
    with tempfile.TemporaryDirectory() as scratch:
        repository = Path(scratch) / REPOSITORY
        full = git_bundle(Path(repo), commit, repository)
        members = [(repository, REPOSITORY), *[(f, f"{MNIST}/{f.name}") for f in mnist_files(resolve_data_dir(data_dir))],
                   *[(f, f"{WHEELS}/{f.name}") for f in wheel_files], *([(Path(cache), CACHE)] if cache else [])]
        manifest = bundle_manifest(full, python_version, members)
        write_bundle(archive, manifest, members)
    return manifest


def bundle_manifest(commit: str, python_version: str, members: list[tuple[Path, str]]) -> dict:
    """The manifest of (file, name in the bundle) members: each one's size and sha256."""
    listed = {name: {"size": path.stat().st_size, "sha256": sha256_of(path)} for path, name in members}
    return {"format": MANIFEST_FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "commit": commit, "python": python_version,
            "total_bytes": sum(m["size"] for m in listed.values()), "members": listed}


def write_bundle(archive: Path, manifest: dict, members: list[tuple[Path, str]]) -> None:
    """The tar.gz, its manifest first; written atomically (a failure leaves no partial file)."""
    from mnist_mlp.common.atomic_files import atomic_path

    with atomic_path(archive, hint="Write the bundle somewhere else.") as tmp, \
            tarfile.open(tmp, "w:gz", compresslevel=6) as tar:
        data = json.dumps(manifest, indent=1).encode()
        info = tarfile.TarInfo(MANIFEST_NAME)
        info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
        tar.addfile(info, io.BytesIO(data))
        for path, name in members:
            info = tar.gettarinfo(path, arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode = 0o644
            with open(path, "rb") as f:
                tar.addfile(info, f)


# ---- what a lab does with it

def unpack(bundle, dest, commit: str, python_version: str | None = None) -> dict:
    """Check the whole bundle against its manifest, then move its members into dest (which must
    not exist yet). Returns the manifest. Nothing lands in dest unless every check passes."""
    bundle, dest = Path(bundle), Path(dest)
    python_version = python_version or ".".join(platform.python_version_tuple()[:2])
    if os.path.lexists(dest):
        raise BundleError(f"{dest} exists already: the bundle is unpacked once, at the first boot")
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".class-bundle-", dir=dest.parent))
    try:
        manifest = _check_and_extract(bundle, staging, commit, python_version)
        for path in [staging, *staging.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)  # readable by the lab user, written by none
        staging.rename(dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return manifest


def _check_and_extract(bundle: Path, staging: Path, commit: str, python_version: str) -> dict:
    try:
        tar = tarfile.open(bundle, "r:gz")
        members = tar.getmembers()  # reads the whole archive: a truncated one fails here
    except READ_ERRORS as err:
        raise BundleError(f"{bundle} is not a readable tar.gz, or is truncated ({err}): copy it "
                          "again, or make it again with `make class-bundle`") from err
    with tar:
        bad = check_archive(tar)
        if bad:
            raise BundleError(f"refusing {bundle}: {len(bad)} member(s) could write outside the bundle "
                              f"or create links or devices: {'; '.join(f'{n} ({why})' for n, why in bad[:10])}")
        if not members or members[0].name != MANIFEST_NAME:
            raise BundleError(f"refusing {bundle}: its first member is not {MANIFEST_NAME}: "
                              "make it with `make class-bundle`")
        try:
            manifest = json.load(tar.extractfile(members[0]))
            listed = {name: (int(m["size"]), str(m["sha256"])) for name, m in manifest["members"].items()}
        except (ValueError, KeyError, TypeError, AttributeError, *READ_ERRORS) as err:
            raise BundleError(f"refusing {bundle}: its manifest cannot be read ({err})") from err
        if manifest.get("format") != MANIFEST_FORMAT:
            raise BundleError(f"refusing {bundle}: manifest format {manifest.get('format')!r}, expected "
                              f"{MANIFEST_FORMAT!r}: make it again with this commit's `make class-bundle`")
        if manifest.get("commit") != commit:
            raise BundleError(f"refusing {bundle}: it holds commit {manifest.get('commit')}, the stack "
                              f"names {commit}: give RepositoryCommit the bundle's commit, or make the "
                              "bundle of the tested commit")
        if any(n.startswith(WHEELS + "/") for n in listed) and manifest.get("python") != python_version:
            raise BundleError(f"refusing {bundle}: its wheels are for Python {manifest.get('python')}, "
                              f"this DLAMI venv's is {python_version}: make it again with "
                              f"`make class-bundle PYTHON_VERSION={python_version}`")
        files = [m for m in members[1:] if m.isreg()]
        problems = [f"{n}: listed, not in the bundle" for n in sorted(set(listed) - {m.name for m in files})]
        for m in files:
            if m.name not in listed:
                problems.append(f"{m.name}: in the bundle, not listed")
                continue
            target = staging / m.name
            target.parent.mkdir(parents=True, exist_ok=True)
            digest = hashlib.sha256()
            try:
                with tar.extractfile(m) as source, open(target, "wb") as out:
                    while block := source.read(CHUNK):
                        digest.update(block)
                        out.write(block)
            except READ_ERRORS as err:
                raise BundleError(f"{bundle}: reading {m.name} failed ({err}); the bundle is damaged: "
                                  "copy it again") from err
            if (m.size, digest.hexdigest()) != listed[m.name]:
                problems.append(f"{m.name}: {m.size} bytes, sha256 {digest.hexdigest()[:12]}…, the "
                                f"manifest says {listed[m.name][0]} bytes, {listed[m.name][1][:12]}…")
        if problems:
            raise BundleError(f"refusing {bundle}: its members contradict its manifest "
                              f"({'; '.join(problems[:5])}): copy it again, or make it again")
    return manifest


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.bundle", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("make", help="write the class bundle")
    make.add_argument("archive", type=Path)
    make.add_argument("--commit", default="HEAD", help="the tested commit (default HEAD)")
    make.add_argument("--cache", type=Path, help="the classroom cache archive to include")
    make.add_argument("--data-dir", type=Path, help="where `make data` put MNIST (default: data/)")
    make.add_argument("--wheels", type=Path, help="a directory of wheels instead of downloading them")
    make.add_argument("--python-version", default=DLAMI_PYTHON, help="the DLAMI venv's Python")
    unpack_cmd = sub.add_parser("unpack", help="check a bundle whole, then unpack it into DIR")
    unpack_cmd.add_argument("bundle", type=Path)
    unpack_cmd.add_argument("dest", type=Path)
    unpack_cmd.add_argument("--commit", required=True, help="the commit the stack names")
    args = parser.parse_args(argv)
    try:
        if args.command == "unpack":
            manifest = unpack(args.bundle, args.dest, args.commit)
            print(f"class bundle: {len(manifest['members'])} members checked (sha256) and unpacked into {args.dest}")
            return 0
        with tempfile.TemporaryDirectory() as scratch:
            wheels = args.wheels
            if wheels is None:
                wheels = Path(scratch)
                command = download_command(wheels, args.python_version)
                print(" ".join(command), flush=True)
                if subprocess.run(command).returncode:
                    raise BundleError("pip download failed (above): it needs PyPI, here, once")
            manifest = make_bundle(args.archive, commit=args.commit, data_dir=args.data_dir,
                                   wheels=wheels, cache=args.cache, python_version=args.python_version)
    except BundleError as err:
        print(f"class bundle: {err}", file=sys.stderr)
        return 2
    wheel_count = sum(n.startswith(WHEELS + "/") for n in manifest["members"])
    print(f"{args.archive}: commit {manifest['commit']}, MNIST, {wheel_count} wheels for Python "
          f"{manifest['python']}{', the classroom cache' if CACHE in manifest['members'] else ''}; "
          f"{manifest['total_bytes'] / 1e6:.1f} MB unpacked, {args.archive.stat().st_size / 1e6:.1f} MB "
          "to upload to a bucket in the stack's Region")
    return 0


if __name__ == "__main__":
    sys.exit(main())
