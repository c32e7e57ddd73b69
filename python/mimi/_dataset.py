"""mimi.read_dataset: the items of a `mimi dataset encode` output (docs/DATASETS.md), shard by
shard in planned order, read with tarfile + numpy (no engine needed)."""

import io
import json
import os
import re
import tarfile
from typing import Iterator, NamedTuple

import numpy as np

import errno

from ._errors import InputError, ResourceError

_MACHINE_ERRNOS = {errno.EIO, errno.ENOMEM, errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.EAGAIN}


class DatasetItem(NamedTuple):
    """One encoded item: its tar key, its codes [n_q, frames] (int64) and its <key>.json."""

    key: str
    codes: np.ndarray
    meta: dict


_SHARD = re.compile(r"shard-(\d+)\.tar")


def read_dataset(out_dir, unfinished=False) -> Iterator[DatasetItem]:
    """Yields every item of the finished shards of OUT_DIR (those with their .done record), in
    shard order and, within a shard, in planned order. unfinished=True also reads the items a
    running or interrupted worker has appended so far (shard-N.tar.partial). A shard whose tar
    cannot be read, or an item whose members disagree, raises mimi.InputError naming it."""
    root = os.fspath(out_dir)
    if not os.path.isfile(os.path.join(root, "dataset.json")):
        raise InputError(f"{os.fsdecode(root)}: not a `mimi dataset encode` output (no dataset.json)")
    shards = os.path.join(root, "shards")
    names = sorted(os.listdir(shards)) if os.path.isdir(shards) else []
    for name in names:
        m = _SHARD.fullmatch(name)
        base = os.path.join(shards, name)
        if m:
            if os.path.isfile(base[: -len(".tar")] + ".done"):
                yield from _read_tar(base)
        elif unfinished and name.endswith(".tar.partial") and _SHARD.fullmatch(name[: -len(".partial")]):
            if not os.path.exists(base[: -len(".partial")]):
                yield from _read_tar(base, partial=True)


def _read_tar(path, partial=False):
    what = os.fsdecode(path)
    try:
        with tarfile.open(path, "r:") as tar:
            pending = None  # (key, codes) waiting for its .json
            while True:
                try:
                    member = tar.next()
                except tarfile.ReadError:
                    if partial:  # a worker may be writing the next member right now
                        return
                    raise
                if member is None:
                    break
                data = tar.extractfile(member).read()
                if member.name.endswith(".npy"):
                    key = member.name[: -len(".npy")]
                    pending = (key, np.load(io.BytesIO(data), allow_pickle=False).astype(np.int64))
                elif member.name.endswith(".json"):
                    key = member.name[: -len(".json")]
                    if pending is None or pending[0] != key:
                        raise InputError(f"{what}: member {member.name} without its .npy before it")
                    yield DatasetItem(key, pending[1], json.loads(data))
                    pending = None
    except (tarfile.TarError, ValueError) as e:
        raise InputError(f"{what}: {e}") from None
    except OSError as e:  # the machine's failures as the CLI names them (run again); the rest is the input's
        cls = ResourceError if e.errno in _MACHINE_ERRNOS else InputError
        raise cls(f"{what}: {e.strerror or e}") from None
