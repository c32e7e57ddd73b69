"""mimi.read_dataset: the items of a `mimi dataset encode` output (docs/DATASETS.md), shard by
shard in planned order. Which shards and which bytes of them are judged by the CLI's own functions
(app/dataset/reader.h: a finished shard by its .done, as `status` and the workers judge it; an
unfinished one by the journal records its tar bears out, as a resume keeps them); the members are
read here with tarfile + numpy."""

import errno
import hashlib
import io
import json
import os
import tarfile
import warnings
from typing import Iterator, NamedTuple

import numpy as np

from . import _mimi
from ._codec import _flag, _path
from ._errors import InputError, ResourceError

_MACHINE_ERRNOS = {errno.EIO, errno.ENOMEM, errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.EAGAIN}


class DatasetWarning(UserWarning):
    """A shard of the output read_dataset skips (or reads as unfinished): its .done is not valid."""


class DatasetItem(NamedTuple):
    """One encoded item: its tar key, its codes [n_q, frames] (int64) and its <key>.json."""

    key: str
    codes: np.ndarray
    meta: dict


def read_dataset(out_dir, unfinished=False) -> Iterator[DatasetItem]:
    """Yields every item of the finished shards of OUT_DIR (those with a valid .done record, as
    `mimi dataset status` counts them), in shard order and, within a shard, in planned order.
    unfinished=True also yields the items a running or interrupted worker has recorded so far
    (those its journal records and its shard-N.tar.partial bears out). Only the shards of the
    output's dataset.json are read. A shard whose bytes differ from what its .done records, or an
    item whose codes are not the output's, raises mimi.InputError naming it."""
    root = _path(out_dir)
    ds_text, shards, stale = _mimi._dataset_shards(root, _flag("unfinished", unfinished))
    for why in stale:  # a finished shard changed since (or a .done of another run): said, as status says it
        warnings.warn(f"{why}; its shard is read as unfinished" if unfinished else f"{why}; its shard is skipped",
                      DatasetWarning, stacklevel=2)
    ds = json.loads(ds_text)
    return _items(ds, shards)


def _items(ds, shards):
    for _shard, tar, size, sha256, items in shards:
        yield from _read_tar(os.fsdecode(tar), tar, size, sha256, items, ds)


def _read_tar(what, path, size, sha256, items, ds):
    try:
        with open(path, "rb") as f:
            data = f.read(size)
    except OSError as e:  # the machine's failures as the CLI names them (run again); the rest is the input's
        cls = ResourceError if e.errno in _MACHINE_ERRNOS else InputError
        raise cls(f"{what}: {e.strerror or e}") from None
    if len(data) != size:
        raise InputError(f"{what}: {len(data)} bytes, {size} recorded (changed while read?)")
    # (read_done has hashed the file already; these are the bytes yielded, read after it)
    if sha256 and hashlib.sha256(data).hexdigest() != sha256:
        raise InputError(f"{what}: its bytes are not those its .done records (sha256 differs): damaged or replaced "
                         "since the shard finished (`mimi dataset verify` names it; its worker redoes it)")
    n_q, bins = int(ds.get("n_q", 0)), int(ds.get("codebook_size", 0))
    got = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data + bytes(1024)), mode="r:") as tar:
            pending = None  # (key, codes) waiting for its .json
            for member in tar:
                body = tar.extractfile(member).read()
                name = os.fsencode(member.name)
                where = f"{what}: {member.name}"
                if member.name.endswith(".npy"):
                    key = member.name[: -len(".npy")]
                    codes = _mimi._dataset_npy(body, os.fsencode(what) + b": " + name)
                    if codes.shape[0] != n_q:
                        raise InputError(f"{where}: {codes.shape[0]} codebooks, the output's n_q is {n_q}")
                    if codes.size and (codes.min() < 0 or codes.max() >= bins):
                        raise InputError(f"{where}: a code outside [0, {bins})")
                    pending = (key, codes)
                elif member.name.endswith(".json"):
                    key = member.name[: -len(".json")]
                    if pending is None or pending[0] != key:
                        raise InputError(f"{where}: without its .npy before it")
                    try:
                        meta = json.loads(body)
                    except ValueError as e:
                        raise InputError(f"{where}: not JSON ({e})") from None
                    if (not isinstance(meta, dict) or meta.get("key") != key or meta.get("frames") != pending[1].shape[1]
                            or meta.get("n_q", n_q) != n_q):
                        raise InputError(f"{where}: its key, frames or n_q disagree with its .npy")
                    yield DatasetItem(key, pending[1], meta)
                    got += 1
                    pending = None
                else:
                    raise InputError(f"{where}: not an item's member (.npy or .json)")
    except InputError:
        raise
    except (tarfile.TarError, ValueError) as e:
        raise InputError(f"{what}: {e}") from None
    if got != items:
        raise InputError(f"{what}: {got} items, {items} recorded")
