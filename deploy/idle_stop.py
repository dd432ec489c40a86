"""Stops a workshop lab that nobody uses: `python -m deploy.idle_stop`, run every minute by the
workshop-idle timer that deploy/bootstrap.sh installs (docs/workshop-stack.md).

A lab is busy while a kernel is busy or starting, or a process holds a NeuronCore (a script or
torchrun a notebook or terminal started: helpers/setup/core_holders.py decides who holds one,
neuron-ls and neuron-monitor, which only read it, left out). Otherwise it has been idle since the latest of: JupyterLab's
start, any kernel's or terminal's last activity (JupyterLab's REST API), and the last time this
check saw it busy. After --idle-minutes of that, the machine shuts down; the stack launches its
instances with InstanceInitiatedShutdownBehavior `stop`, so the instance stops and its EBS volume,
with the learner's work, stays. An open browser tab alone keeps nothing up: the check asks with
`no_track_activity=1` and counts kernel and terminal activity, not the page's own polling.

What the last busy moment was is kept in --state (under /run: forgotten at boot, when the clock
starts again from JupyterLab's start). Exit status 0 in every case but bad arguments; what was
decided is printed (the journal of workshop-idle.service keeps it).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from helpers.launch.procfs import PROC_DIR
from helpers.setup.core_holders import neuron_device_holders

BUSY_STATES = frozenset({"busy", "starting"})
STATE_FILE = Path("/run/workshop-lab-idle.json")
STOP_COMMAND = ("shutdown", "-h", "now", "workshop lab idle: stopping this instance")
API_TIMEOUT_S = 10


@dataclass(frozen=True)
class LabActivity:
    """What JupyterLab's API and /proc say at one moment."""
    started: datetime | None  # JupyterLab's start (/api/status); None: it did not answer
    kernels: list[dict] = field(default_factory=list)  # /api/kernels
    terminals: list[dict] = field(default_factory=list)  # /api/terminals
    core_holders: list[str] = field(default_factory=list)  # processes holding a NeuronCore
    unanswered: str = ""  # why JupyterLab's API did not answer, when it did not


@dataclass(frozen=True)
class Verdict:
    busy: bool
    idle_seconds: float
    stop: bool
    why: str


def parse_time(text: str) -> datetime:
    """JupyterLab's timestamps: ISO 8601 in UTC with a trailing Z."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def decide(activity: LabActivity, now: datetime, idle_minutes: float,
           last_busy: datetime | None = None, first_seen: datetime | None = None) -> Verdict:
    """Busy, or idle for how long and whether that is long enough to stop.

    first_seen: when this check first ran since boot; the idle clock starts there when
    JupyterLab has never answered (a lab whose server died still stops)."""
    if activity.core_holders:
        return Verdict(True, 0.0, False, f"busy: {len(activity.core_holders)} process(es) hold a "
                       f"NeuronCore ({'; '.join(activity.core_holders)})")
    busy = [k for k in activity.kernels if k.get("execution_state") in BUSY_STATES]
    if busy:
        return Verdict(True, 0.0, False, f"busy: {len(busy)} kernel(s) "
                       f"{', '.join(sorted({k['execution_state'] for k in busy}))}")
    moments = [m for m in (activity.started or first_seen, last_busy) if m is not None]
    moments += [parse_time(item["last_activity"]) for item in activity.kernels + activity.terminals
                if item.get("last_activity")]
    since = max(moments) if moments else now
    idle = max(0.0, (now - since).total_seconds())
    limit = idle_minutes * 60
    what = (f"JupyterLab does not answer ({activity.unanswered}); " if activity.started is None
            else "") + (
        f"idle for {idle / 60:.1f} min of {idle_minutes:g} ({len(activity.kernels)} kernel(s), "
        f"{len(activity.terminals)} terminal(s), no NeuronCore held)")
    return Verdict(False, idle, idle >= limit, ("stopping: " if idle >= limit else "") + what)


def _get(url: str, token: str):
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=API_TIMEOUT_S) as answer:
        return json.load(answer)


def read_activity(port: int, token: str, proc_root: Path = PROC_DIR,
                  dev_root: Path = Path("/dev")) -> LabActivity:
    """JupyterLab's status, kernels and terminals (without counting as activity), and who holds
    a NeuronCore."""
    holders = [h.describe() for h in neuron_device_holders(proc_root, dev_root).core_holders]
    base = f"http://127.0.0.1:{port}/api"
    try:
        status = _get(f"{base}/status", token)
        kernels = _get(f"{base}/kernels?no_track_activity=1", token)
        terminals = _get(f"{base}/terminals?no_track_activity=1", token)
        started = parse_time(status["started"])
    except (OSError, ValueError, KeyError) as error:  # URLError is an OSError
        return LabActivity(None, core_holders=holders, unanswered=str(error) or type(error).__name__)
    return LabActivity(started, kernels, terminals, holders)


def _load_state(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def check(port: int, token: str, idle_minutes: float, state_path: Path,
          now: datetime | None = None, proc_root: Path = PROC_DIR,
          dev_root: Path = Path("/dev")) -> Verdict:
    """One check: read, decide, remember the busy moment."""
    now = now or datetime.now(timezone.utc)
    state = _load_state(state_path)
    first_seen = parse_time(state["first_seen"]) if "first_seen" in state else now
    last_busy = parse_time(state["last_busy"]) if "last_busy" in state else None
    verdict = decide(read_activity(port, token, proc_root, dev_root), now, idle_minutes,
                     last_busy, first_seen)
    state["first_seen"] = first_seen.isoformat()
    if verdict.busy:
        state["last_busy"] = now.isoformat()
    state_path.parent.mkdir(parents=True, exist_ok=True)
    state_path.write_text(json.dumps(state))
    return verdict


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.idle_stop",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8888, help="JupyterLab's port on 127.0.0.1")
    parser.add_argument("--idle-minutes", type=float, required=True)
    parser.add_argument("--state", type=Path, default=STATE_FILE)
    parser.add_argument("--dry-run", action="store_true", help="decide and print, never stop")
    args = parser.parse_args(argv)
    if args.idle_minutes <= 0:
        parser.error("--idle-minutes must be more than 0")
    token = os.environ.get("JUPYTER_TOKEN", "")
    verdict = check(args.port, token, args.idle_minutes, args.state)
    print(verdict.why, flush=True)
    if verdict.stop and not args.dry_run:
        subprocess.run(STOP_COMMAND, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
