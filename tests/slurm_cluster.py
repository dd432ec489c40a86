"""A real Slurm cluster on this machine for tests/test_slurm.py: Debian's slurm-wlm and munge
(`make slurm` installs them), a munged with its own key, a slurmctld and two slurmd nodes
(`slurmd -N <node>`) on the loopback address, each on its own port, everything
in a temporary directory with its own slurm.conf (SLURM_CONF), started here and stopped here:
jobs cancelled, then every process of this cluster ended, whatever happened in between."""
from __future__ import annotations

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import psutil

from helpers.launch.processes import free_port

COMMANDS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "scancel", "sinfo",
            "squeue")
# node name -> NodeAddr, node 0 first. Both on 127.0.0.1, each slurmd on its own port: with
# NoInAddrAny a slurmd binds the address its host's name resolves to, whatever NodeAddr says.
NODES = {"n0": "127.0.0.1", "n1": "127.0.0.1"}
START_TIMEOUT_S = 30
SLURMD_TIMEOUT_S = 6
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE", "PREEMPTED"}


class ClusterUnavailable(RuntimeError):
    """Slurm cannot be installed or started here; the message says why."""


class NotRoot(ClusterUnavailable):
    """Not root: slurmd, which starts every job's processes as their user, cannot run."""


SLURM_CONF = """\
ClusterName=workbook
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
# Every daemon binds the address it is given, never all interfaces.
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/linear
SchedulerType=sched/builtin
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
KillWait=5
# A node that stops answering is marked DOWN after this many seconds (the controller pings every
# third of it), and its jobs end NODE_FAIL: short, so that the lost-node test ends soon.
SlurmdTimeout={slurmd_timeout}
InactiveLimit=0
MinJobAge=300
# A job whose launch fails ends FAILED, not requeued.
JobRequeue=0
# Job ids (and so the batch script's rendezvous port) differ from one test run to the next.
FirstJobId={first_job_id}
{nodes}
PartitionName=workbook Nodes={node_names} Default=YES MaxTime=10 State=UP
"""


def processes_of(conf: Path) -> list[psutil.Process]:
    """Every live process of the cluster whose slurm.conf is `conf`: those started with it as
    their SLURM_CONF (the daemons, the jobs' scripts, srun, torchrun and its workers), and its
    slurmstepd processes, which overwrite their environment with their title but keep their
    node's log, in the cluster's directory, open."""
    root = f"{conf.parent}{os.sep}"
    found = []
    for proc in psutil.process_iter(["name"]):
        try:
            if proc.info["name"] == "slurmstepd":
                if any(f.path.startswith(root) for f in proc.open_files()):
                    found.append(proc)
            elif proc.environ().get("SLURM_CONF") == str(conf):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def missing_commands() -> list[str]:
    return [c for c in COMMANDS if shutil.which(c) is None]


class LocalCluster:
    def __init__(self, root: Path):
        self.root = root
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.daemons: list[subprocess.Popen] = []
        self.slurmd: dict[str, subprocess.Popen] = {}
        self.nodes = list(NODES)

    # -- start and stop -------------------------------------------------------------------
    def _start(self, argv: list[str], log: str) -> subprocess.Popen:
        out = open(self.root / log, "w")
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                start_new_session=True)
        out.close()
        self.daemons.append(proc)
        return proc

    def start(self) -> None:
        if os.geteuid() != 0:
            raise NotRoot("slurmd starts each job as its user and must run as root: run the "
                          "tests as root")
        (self.root / "munge").mkdir(mode=0o755)
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        for sub in ("state", *(f"spool/{name}" for name in NODES)):
            (self.root / sub).mkdir(parents=True)
        munge = self.root / "munge"
        self._start(["munged", "--foreground", f"--key-file={key}",
                     f"--socket={munge}/munge.sock", f"--pid-file={munge}/munged.pid",
                     f"--log-file={munge}/munged.log", f"--seed-file={munge}/munged.seed"],
                    "munged.out")
        self._wait_for(lambda: (munge / "munge.sock").exists(), "munged's socket", "munged.out")
        nodes = "\n".join(f"NodeName={name} NodeHostname={socket.gethostname()} NodeAddr={addr} "
                          f"Port={free_port()} CPUs=1 State=UNKNOWN" for name, addr in NODES.items())
        self.conf.write_text(SLURM_CONF.format(
            host=socket.gethostname().split(".")[0], ctld_port=free_port(),
            slurmd_port=free_port(), root=self.root, first_job_id=random.randrange(1000, 19000),
            nodes=nodes, node_names=",".join(NODES), slurmd_timeout=SLURMD_TIMEOUT_S))
        self._start(["slurmctld", "-D", "-f", str(self.conf)], "slurmctld.out")
        for name in NODES:
            self.start_node(name)
        self._wait_for(self._nodes_idle, "both nodes idle", "slurmctld.out")

    def start_node(self, name: str) -> None:
        self.slurmd[name] = self._start(["slurmd", "-D", "-N", name, "-f", str(self.conf)],
                                        f"slurmd-{name}.out")

    def node_processes(self, name: str) -> list[psutil.Process]:
        """What node `name` runs, as a lost instance would lose it: its slurmd, its slurmstepd
        processes (those keeping the node's own log open) and every process under them."""
        log = str(self.root / f"slurmd-{name}.log")
        tops = [psutil.Process(self.slurmd[name].pid)]
        for proc in self.processes():
            try:
                if proc.name() == "slurmstepd" and any(f.path == log for f in proc.open_files()):
                    tops.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        found = {}
        for top in tops:
            try:
                for proc in (top, *top.children(recursive=True)):
                    found[proc.pid] = proc
            except psutil.NoSuchProcess:
                continue
        return list(found.values())

    def lose_node(self, name: str) -> dict[int, str]:
        """Node `name` stops at once, as a lost instance: every process of node_processes is
        frozen (SIGSTOP, so none sees another go), then killed. Returns their pids and names."""
        doomed = self.node_processes(name)
        names = {}
        for proc in doomed:
            try:
                names[proc.pid] = proc.name()
            except psutil.NoSuchProcess:
                pass
        for signum in (signal.SIGSTOP, signal.SIGKILL):
            for proc in doomed:
                try:
                    proc.send_signal(signum)
                except psutil.NoSuchProcess:
                    pass
        psutil.wait_procs(doomed, timeout=10)
        self.slurmd[name].wait(timeout=10)
        self.daemons.remove(self.slurmd.pop(name))  # lost, not a daemon that failed to start
        return names

    def node(self, name: str) -> dict[str, str]:
        """`scontrol show node` as fields: State, Reason, ..."""
        out = self.run(["scontrol", "-o", "show", "node", name]).stdout
        fields = dict(field.split("=", 1) for field in out.split() if "=" in field)
        reason = re.search(r"Reason=(.*?)(?: \w+=|$)", out)  # a reason holds spaces
        return {**fields, "Reason": reason.group(1) if reason else ""}

    def restore_node(self, name: str) -> None:
        """Start a lost node's slurmd again: with ReturnToService=2 it is idle once it has
        registered."""
        self.start_node(name)
        self._wait_for(self._nodes_idle, f"{name} back and idle", f"slurmd-{name}.out")

    def _nodes_idle(self) -> bool:
        out = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False).stdout.split()
        return dict(zip(out[::2], out[1::2])) == {name: "idle" for name in NODES}

    def _wait_for(self, ready, what: str, log: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if ready():
                return
            dead = [p for p in self.daemons if p.poll() is not None]
            if dead:
                break
            time.sleep(0.2)
        tail = "\n".join((self.root / log).read_text(errors="replace").splitlines()[-8:])
        raise ClusterUnavailable(f"the local Slurm cluster did not come up ({what}): {tail}")

    def processes(self) -> list[psutil.Process]:
        return processes_of(self.conf)

    def stop(self) -> None:
        """Cancel every job, stop the daemons, then end whatever of this cluster is left."""
        if self.conf.exists():  # let Slurm end its jobs itself first, then end what is left
            self.run(["scancel", "--full", "--user", "root"], check=False)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and self.run(
                    ["squeue", "-h", "-o", "%i"], check=False).stdout.strip():
                time.sleep(0.3)
        for proc in reversed(self.daemons):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.daemons:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        leftovers = self.processes()
        for proc in leftovers:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(leftovers, timeout=10)

    # -- jobs -----------------------------------------------------------------------------
    def run(self, argv: list[str], check: bool = True, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(argv, env=kwargs.pop("env", self.env), text=True,
                              capture_output=True, check=check, timeout=60, **kwargs)

    def sbatch(self, script: str, args: list[str], env: dict[str, str], cwd: Path,
               nodes: int = 2) -> int:
        out = self.run(["sbatch", "--parsable", f"--nodes={nodes}",
                        f"--output={self.root}/job-%j.out", script, *args],
                       env={**env, "SLURM_CONF": str(self.conf)}, cwd=cwd)
        return int(out.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        """`scontrol show job` as fields: JobState, ExitCode, NodeList, ..."""
        out = self.run(["scontrol", "-o", "show", "job", str(job_id)]).stdout
        return dict(field.split("=", 1) for field in out.split() if "=" in field)

    def wait(self, job_id: int, timeout: float) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if job["JobState"] in FINISHED:
                return job
            time.sleep(0.3)
        raise TimeoutError(f"job {job_id} still {job['JobState']} after {timeout:g} s")

    def output(self, job_id: int) -> str:
        return (self.root / f"job-{job_id}.out").read_text(errors="replace")

    def job_processes(self, job_id: int, node: int | None = None) -> list[psutil.Process]:
        """The job's own processes (not slurmstepd): its scripts, srun, torchrun, workers;
        node= only those of that node rank."""
        found = []
        for proc in self.processes():
            try:
                env = proc.environ()
                if (env.get("SLURM_JOB_ID") == str(job_id) and proc.name() != "slurmstepd"
                        and (node is None or env.get("SLURM_NODEID") == str(node))):
                    found.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return found


@contextmanager
def local_cluster():
    """A started LocalCluster, stopped (every process of it) on leaving, even on failure."""
    missing = missing_commands()
    if missing:
        raise ClusterUnavailable(f"{', '.join(missing)} not installed: run `make slurm` "
                                 "(Debian's slurm-wlm and munge)")
    # munged wants every directory above its socket searchable by all: not pytest's 0700 tmp.
    root = Path(tempfile.mkdtemp(prefix="workbook-slurm-"))
    root.chmod(0o755)
    cluster = LocalCluster(root)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
