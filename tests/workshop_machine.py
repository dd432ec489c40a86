"""A workshop lab's machine, simulated for tests/test_workshop_bootstrap.py: a Neuron DLAMI venv
(a real venv holding the pinned stack: this venv's site-packages, plus the dist-info of the
Neuron 2.31 torch-neuronx and neuronx-cc), the workbook as a git repository to clone, the commands
the user data calls, stood in for on PATH: `aws` records its arguments (one JSON list per line in
<bin>/calls.jsonl); `systemctl` starts a unit's ExecStart as systemd would (its User,
WorkingDirectory, EnvironmentFile, Environment), in a session of its own, and records the pid in
<systemd dir>/<unit>.pid; and the wait condition handle's presigned URL, stood in for by an HTTP
server on 127.0.0.1 that keeps every PUT body (SignalServer)."""
from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.paths import REPO_ROOT
from tests.test_venv_plan import make_venv, site_packages

NEURON_PACKAGES = {"torch_neuronx": "2.9.0.2.15.32035", "neuronx_cc": "2.26.6360.0"}

RECORDER = """#!{python}
import json, sys
with open({calls!r}, "a") as calls:
    calls.write(json.dumps([{name!r}, *sys.argv[1:]]) + "\\n")
"""

SYSTEMCTL = '''#!{python}
"""systemctl for a machine without systemd: daemon-reload, enable [--now] UNIT..., status UNIT."""
import os, pwd, shlex, subprocess, sys
from pathlib import Path

units = Path(os.environ["LAB_SYSTEMD_DIR"])

def read_unit(name):
    keys = {{}}
    for line in (units / name).read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            keys.setdefault(key, []).append(value)
    return keys

def start(name):
    unit = read_unit(name)
    user = unit.get("User", [pwd.getpwuid(os.getuid()).pw_name])[0]
    if user != pwd.getpwuid(os.getuid()).pw_name:
        sys.exit(f"stand-in systemctl: {{name}} runs as {{user}}, not as this user")
    env = dict(os.environ)
    for path in unit.get("EnvironmentFile", []):
        for line in Path(path).read_text().splitlines():
            key, _, value = line.partition("=")
            env[key] = value
    for assignment in unit.get("Environment", []):
        key, _, value = assignment.partition("=")
        env[key] = value
    log = open(units / (name + ".log"), "ab")
    child = subprocess.Popen(shlex.split(unit["ExecStart"][0]), cwd=unit["WorkingDirectory"][0],
                             env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    (units / (name + ".pid")).write_text(str(child.pid))

args = [a for a in sys.argv[1:] if not a.startswith("--")]
if args[0] == "enable" and "--now" in sys.argv:
    for name in args[1:]:
        if name.endswith(".service"):
            start(name)
        (units / (name + ".enabled")).touch()
elif args[0] == "status":
    print((units / (args[1] + ".log")).read_text(errors="replace"))
'''


def write_dlami(opt: Path, neuron_packages=NEURON_PACKAGES) -> Path:
    """/opt/aws_neuronx_venv_pytorch_2_9: a venv whose site-packages see this venv's (torch,
    torch-xla, torchvision, the notebook packages), with their commands in its bin/, and hold the
    Neuron packages' dist-info."""
    base = make_venv(opt / "aws_neuronx_venv_pytorch_2_9")
    ours = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (site_packages(base) / "_this_venv.pth").write_text("".join(f"{p}\n" for p in ours))
    # Their console scripts too, as a venv holding them has (jupyter, torchrun, ...): make venv
    # links a DLAMI venv's commands into .venv/bin.
    ours_bin = Path(sys.executable).parent.resolve()  # .venv may be a symlink
    for script in ours_bin.iterdir():
        target = base / "bin" / script.name
        try:
            first, rest = script.read_text().split("\n", 1)
        except (UnicodeDecodeError, ValueError, OSError):
            continue
        if first.startswith("#!") and Path(first[2:].strip()).parent.resolve() == ours_bin \
                and not target.exists():
            target.write_text(f"#!{base / 'bin' / 'python'}\n{rest}")
            target.chmod(0o755)
    for name, version in neuron_packages.items():
        info = site_packages(base) / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\n"
                                       f"Version: {version}\n")
    return base


def write_repository(origin: Path, branch: str) -> tuple[str, str]:
    """The workbook as it is in this checkout (committed or not), committed on `branch` of a
    new repository: what a lab clones. Returns (its URL, the commit's id)."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=REPO_ROOT, capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, (f.decode() for f in files)):
        source = REPO_ROOT / name
        if source.is_file():
            (origin / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, origin / name)
    git = ["git", "-C", str(origin), "-c", "user.name=test", "-c", "user.email=test@localhost"]
    subprocess.run(git + ["init", "-q", "-b", branch], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "the workbook"], check=True)
    commit = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    return str(origin), commit.stdout.strip()


def write_commands(bin_dir: Path) -> Path:
    """aws and systemctl stand-ins in bin_dir; returns the calls file."""
    bin_dir.mkdir(parents=True)
    calls = bin_dir / "calls.jsonl"
    calls.touch()
    (bin_dir / "aws").write_text(RECORDER.format(python=sys.executable, calls=str(calls), name="aws"))
    (bin_dir / "systemctl").write_text(SYSTEMCTL.format(python=sys.executable))
    for script in bin_dir.iterdir():
        script.chmod(0o755)
    return calls


def recorded_calls(calls: Path) -> list[list[str]]:
    return [json.loads(line) for line in calls.read_text().splitlines()]


def stop_units(systemd_dir: Path, wait_s: float = 15) -> None:
    """Ends every service the stand-in systemctl started, with its whole session, and waits for
    them to be gone."""
    sessions = [int(pid_file.read_text()) for pid_file in systemd_dir.glob("*.pid")]
    for session in sessions:
        try:
            os.killpg(session, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + wait_s
    for session in sessions:
        while time.monotonic() < deadline:
            try:
                os.killpg(session, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(session, signal.SIGKILL)


class SignalServer:
    """The wait condition handle's URL on 127.0.0.1: keeps each PUT's JSON body (and its
    Content-Type header), answers 200 as S3 does. `with SignalServer() as server:` stops it."""

    def __init__(self):
        self.signals: list[dict] = []
        self.content_types: list[str | None] = []
        received = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_PUT(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                received.content_types.append(self.headers.get("Content-Type"))
                received.signals.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.timeout = 5
        self.url = (f"http://127.0.0.1:{self.httpd.server_port}/arn%3Aaws%3Acloudformation/Lab01Signal"
                    "?X-Amz-Expires=86399&X-Amz-Signature=0123abcd")
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                       daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)
