"""ensure_mnist's first choice, torchvision's download, over real HTTP from a mirror on loopback.

The mirror serves gzip files made from the verified IDX files. Our gzip bytes differ from the
canonical .gz files, so the subprocess points torchvision's MNIST at this mirror and at these
files' md5s (torchvision's own class attributes): everything after that is the real path,
including our md5 check of what torchvision extracted.
"""
import functools
import gzip
import hashlib
import http.server
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from mnist_mlp.download import IDX_MD5, raw_dir
from tests.conftest import REPO_ROOT


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


def ensure_from_mirror(root, url, gz_md5s):
    code = textwrap.dedent(f"""
        from torchvision.datasets import MNIST
        MNIST.mirrors = [{url!r}]
        MNIST.resources = list({sorted(gz_md5s.items())!r})
        from mnist_mlp.download import ensure_mnist
        ensure_mnist({str(root)!r}, progress=False)
    """)
    env = dict(os.environ, NO_PROXY="127.0.0.1", no_proxy="127.0.0.1",
               PIP_NO_INDEX="1", PIP_FIND_LINKS="", PIP_CONFIG_FILE=os.devnull)
    return subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def real_idx_files(mnist_root):
    return {name: (raw_dir(mnist_root) / name).read_bytes() for name in IDX_MD5}


def test_download_from_a_mirror(tmp_path, mirror, mnist_root):
    url, serve = mirror
    gz_md5s = serve(real_idx_files(mnist_root))
    proc = ensure_from_mirror(tmp_path / "data", url, gz_md5s)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "downloaded from the torchvision mirrors" in proc.stdout
    for name, md5 in IDX_MD5.items():
        assert hashlib.md5((raw_dir(tmp_path / "data") / name).read_bytes()).hexdigest() == md5


def test_a_mirror_serving_wrong_data_is_refused(tmp_path, mirror, mnist_root):
    """torchvision accepts the archive (its md5 matches what it was told), but the extracted
    file is not MNIST: our md5 check refuses it, and with no package to fall back on the
    error names the file and says how to supply the data."""
    url, serve = mirror
    files = real_idx_files(mnist_root)
    images = bytearray(files["t10k-images-idx3-ubyte"])
    images[5000] ^= 0xFF
    files["t10k-images-idx3-ubyte"] = bytes(images)
    proc = ensure_from_mirror(tmp_path / "data", url, serve(files))
    assert proc.returncode != 0
    assert "MnistDataError" in proc.stderr
    assert "t10k-images-idx3-ubyte from the torchvision mirrors has the wrong md5" in proc.stderr
    assert "MNIST/raw" in proc.stderr  # where to put the files by hand
    assert not (raw_dir(tmp_path / "data") / "t10k-images-idx3-ubyte").exists()
