"""The classes a hostile probe of the module found wrong (issue 30, helper-31), each swept with
generated cases: an output that is the call's own input, NUL bytes in paths, n_q set to what the
constructor refuses, lists that are not one array, read_dataset's paths and the shards and bytes
it may believe, and a weights mismatch named as Python spells its override."""
import os
import shutil

import numpy as np
import pytest

import mimi
from conftest import DATA, weights
from test_module import _speechlike, _write_wav


def _paths_onto(tmp_path, src):
    """Names of `src` itself: as given, relative, through a symlink, a hard link, /dev/fd/N."""
    link = tmp_path / ("link" + src.suffix)
    link.symlink_to(src)
    hard = tmp_path / ("hard" + src.suffix)
    os.link(src, hard)
    names = [src, str(src), os.fsencode(src), os.path.relpath(src), link, hard]
    return names


# --- an output that is the call's own input ------------------------------------------------------

@pytest.mark.parametrize("ext", ["mimi", "npy", "txt"])
def test_decode_file_never_overwrites_its_token_file(tmp_path, codec, cli, ext):
    wav = tmp_path / "x.wav"
    _write_wav(wav, _speechlike(0.5, 24000, seed=3), 24000)
    src = tmp_path / f"x.{ext}"
    cli("encode", wav, "-o", src)
    before = src.read_bytes()
    fd = os.open(src, os.O_RDONLY)
    try:
        for out in [*_paths_onto(tmp_path, src), f"/dev/fd/{fd}"]:
            with pytest.raises(mimi.OutputError, match="is an input"):
                codec.decode_file(src, out, force=True)
            assert src.read_bytes() == before, out
    finally:
        os.close(fd)
    assert codec.decode_file(src, tmp_path / "y.wav", force=True) > 0  # another file is written as ever


# --- NUL bytes in paths --------------------------------------------------------------------------

def test_nul_in_any_path_is_a_usage_error(tmp_path, codec):
    wav = tmp_path / "x.wav"
    _write_wav(wav, _speechlike(0.3, 24000), 24000)
    codes = codec.encode_file(wav)
    for bad in [f"{tmp_path}/a\0b.wav", os.fsencode(f"{tmp_path}/x.wav\0junk"), "\0"]:
        calls = [lambda: codec.encode_file(bad), lambda: codec.decode_file(codes, bad),
                 lambda: codec.decode_file(bad, tmp_path / "o.wav"), lambda: mimi.read_tokens(bad),
                 lambda: mimi.read_dataset(bad), lambda: mimi.Codec(bad)]
        for i, call in enumerate(calls):
            with pytest.raises(mimi.UsageError, match="NUL"):
                call()
            assert not (tmp_path / "a").exists(), i
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.wav"]


# --- n_q, whichever way it is set -----------------------------------------------------------------

def test_n_q_setter_refuses_what_the_constructor_refuses(codec):
    bad = [0, -1, codec.max_n_q + 1, None, "4", 2.5, True, np.float32(3), [4]]
    for v in bad:
        with pytest.raises(mimi.UsageError):
            mimi.Codec(weights(), n_q=v)
        was = codec.n_q
        with pytest.raises(mimi.UsageError):
            codec.n_q = v
        assert codec.n_q == was
    for v in [1, np.int32(3), codec.max_n_q]:
        c = mimi.Codec(weights(), n_q=v)
        assert c.n_q == int(v)
        c.n_q = 2
        assert c.n_q == 2 and c.encode(np.zeros(4000, np.float32)).shape[0] == 2


# --- lists that are not one array -----------------------------------------------------------------

def test_ragged_lists_are_usage_errors(codec):
    rng = np.random.default_rng(1)
    for _ in range(10):
        a, b = (int(n) for n in rng.integers(1, 4000, 2))
        if a == b:
            b += 1
        audio = [list(rng.standard_normal(a) * 0.1), list(rng.standard_normal(b) * 0.1)]
        codes = [[1] * a, [2] * b]
        for call in [lambda: codec.encode(audio), lambda: codec.encode_batch([audio]), lambda: codec.decode(codes),
                     lambda: codec.stream_decoder().feed(codes), lambda: codec.stream_encoder().feed(audio),
                     lambda: codec.decode_file(codes, "/nonexistent/never.wav")]:
            with pytest.raises(mimi.UsageError):
                call()


def test_tokens_decode_as_their_file_does(tmp_path, codec, cli):
    # Tokens (read_tokens) given to decode / decode_file: trimmed to the length their file records
    for secs, rate in [(0.3, 24000), (1.01, 16000), (0.08, 24000)]:
        wav = tmp_path / "x.wav"
        _write_wav(wav, _speechlike(secs, rate), rate)
        tok = tmp_path / "x.mimi"
        cli("encode", wav, "-o", tok, "-f")
        t = mimi.read_tokens(tok)
        y = codec.decode(t)
        assert y.shape[1] == t.meta["original_samples"]
        codec.decode_file(t, tmp_path / "a.wav", force=True)
        codec.decode_file(tok, tmp_path / "b.wav", force=True)
        assert (tmp_path / "a.wav").read_bytes() == (tmp_path / "b.wav").read_bytes()


# --- read_dataset: its paths, the shards and the bytes it may believe -----------------------------

@pytest.fixture(scope="module")
def dataset_dirs(tmp_path_factory, cli):
    """A finished 2-shard output, and a 1-shard output whose worker failed at its third item
    (--max-errors 0): two items journaled in its .tar.partial."""
    root = tmp_path_factory.mktemp("ds")
    wavs = root / "wavs"
    wavs.mkdir()
    for i in range(6):
        _write_wav(wavs / f"u{i}.wav", _speechlike(0.3 + 0.2 * i, 24000, seed=i), 24000)
    cli("dataset", "plan", wavs, "-o", f"{root}/plan/", "--shards", "2", weights_flag=False)
    cli("dataset", "plan", wavs, "-o", f"{root}/plan1/", "--shards", "1", weights_flag=False)
    for s in ["0/2", "1/2"]:
        cli("dataset", "encode", "--plan", f"{root}/plan/", "--shard", s, "-o", f"{root}/out/")
    (wavs / "u2.wav").write_bytes(b"not audio")  # after planning: fails at encode
    r = cli("dataset", "encode", "--plan", f"{root}/plan1/", "--shard", "0/1", "-o", f"{root}/part/", "--max-errors",
            "0", "--sync-items", "1", check=False)
    assert r.returncode == 3
    return root


def _keys(d, **kw):
    return [it.key for it in mimi.read_dataset(d, **kw)]


def test_read_dataset_paths(dataset_dirs):
    out = dataset_dirs / "out"
    want = _keys(out)
    assert len(want) == 6
    for p in [str(out), os.fsencode(out), out, str(out) + "/"]:
        assert _keys(p) == want
    for bad in [None, 3, ["x"]]:
        with pytest.raises(mimi.UsageError):
            mimi.read_dataset(bad)


def test_read_dataset_reads_only_the_outputs_shards(tmp_path, dataset_dirs):
    d = tmp_path / "o"
    shutil.copytree(dataset_dirs / "out", d)
    want = _keys(d)
    sh = d / "shards"
    for n in [2, 3, 99999]:  # copies of finished shards under names the output does not have
        for ext in [".tar", ".done", ".index.jsonl", ".errors.jsonl"]:
            shutil.copy(sh / f"shard-00000{ext}", sh / f"shard-{n:05d}{ext}")
    shutil.copy(sh / "shard-00001.tar", sh / "shard-00007.tar.partial")
    assert _keys(d) == want
    assert _keys(d, unfinished=True) == want


def test_read_dataset_believes_no_changed_byte(tmp_path, dataset_dirs):
    rng = np.random.default_rng(7)
    for trial in range(8):
        d = tmp_path / f"o{trial}"
        shutil.copytree(dataset_dirs / "out", d)
        tar = d / "shards" / "shard-00000.tar"
        b = bytearray(tar.read_bytes())
        at = int(rng.integers(0, len(b) - 1024))  # anywhere in its members (not the end blocks)
        b[at] ^= 1 << int(rng.integers(0, 8))
        tar.write_bytes(bytes(b))
        with pytest.warns(mimi.DatasetWarning):
            keys = _keys(d)
        assert len(keys) == len(_keys(dataset_dirs / "out")) - 3  # shard 0 not taken: its 3 items absent
        with pytest.warns(mimi.DatasetWarning):
            for it in mimi.read_dataset(d, unfinished=True):  # (no journal left: nothing of shard 0)
                assert it.codes.min() >= 0 and it.codes.max() < 64


def test_read_dataset_unfinished_takes_the_journaled_items(tmp_path, dataset_dirs, codec):
    src = dataset_dirs / "part"
    assert _keys(src) == []  # nothing finished
    items = list(mimi.read_dataset(src, unfinished=True))
    assert [it.key for it in items] == ["u0", "u1"]
    for it in items:
        assert np.array_equal(it.codes, codec.encode_file(dataset_dirs / "wavs" / f"{it.key}.wav"))
    partial = src / "shards" / "shard-00000.tar.partial"
    whole = partial.read_bytes()
    rng = np.random.default_rng(3)
    for trial in range(6):  # bytes a worker appended but has not journaled: a member cut anywhere
        d = tmp_path / f"p{trial}"
        shutil.copytree(src, d)
        p = d / "shards" / "shard-00000.tar.partial"
        p.write_bytes(whole + whole[: int(rng.integers(1, len(whole)))])
        assert _keys(d, unfinished=True) == ["u0", "u1"]
    d = tmp_path / "flip"  # a journaled item's bytes changed: it and those after it are not believed
    shutil.copytree(src, d)
    p = d / "shards" / "shard-00000.tar.partial"
    b = bytearray(whole)
    b[len(whole) - 700] ^= 4  # inside the second item
    p.write_bytes(bytes(b))
    assert _keys(d, unfinished=True) == ["u0"]
    d = tmp_path / "lost"  # the .tar.partial lost: a resume encodes the journaled items again; none to read
    shutil.copytree(src, d)
    (d / "shards" / "shard-00000.tar.partial").unlink()
    assert _keys(d, unfinished=True) == []


# --- a weights mismatch, named as Python spells its override --------------------------------------

def test_weights_mismatch_names_the_python_argument(tmp_path, cli):
    wav = tmp_path / "x.wav"
    _write_wav(wav, _speechlike(0.4, 24000), 24000)
    cli("encode", wav, "-o", f"{tmp_path}/x.mimi")
    other = tmp_path / "w2.safetensors"
    cli("gen-weights", "--config", "tiny", "--seed", "7", "-o", str(other),
        weights_flag=False)
    c2 = mimi.Codec(other)
    with pytest.raises(mimi.WeightsError) as e:
        c2.decode_file(tmp_path / "x.mimi", tmp_path / "y.wav")
    assert "allow_weights_mismatch=True" in str(e.value) and "--allow" not in str(e.value)
    assert not (tmp_path / "y.wav").exists()
    assert c2.decode_file(tmp_path / "x.mimi", tmp_path / "y.wav", allow_weights_mismatch=True) > 0


# --- switches are booleans -------------------------------------------------------------------------

def test_switches_refuse_non_booleans(tmp_path, codec):
    codes = codec.encode(np.zeros(4000, np.float32))
    for v in ["no", "False", 0, 1, None, [], "yes"]:
        calls = [lambda: mimi.Codec(weights(), cache=v), lambda: codec.decode_file(codes, tmp_path / "a.wav", force=v),
                 lambda: codec.decode_file(codes, tmp_path / "a.wav", allow_weights_mismatch=v),
                 lambda: mimi.read_dataset(tmp_path, unfinished=v)]
        for call in calls:
            with pytest.raises(mimi.UsageError, match="True or False"):
                call()
    assert not (tmp_path / "a.wav").exists()
    for v in [True, False, np.bool_(True)]:
        codec.decode_file(codes, tmp_path / "a.wav", force=v or (tmp_path / "a.wav").exists())


# --- helper-32's re-probe: Tokens held to the model, pickles of the same weights, the config, and
# messages in Python's words ---------------------------------------------------------------------

def test_tokens_are_held_to_the_model_as_their_file(tmp_path, cli):
    wav = tmp_path / "x.wav"
    _write_wav(wav, _speechlike(0.4, 24000), 24000)
    cli("encode", wav, "-o", tmp_path / "x.mimi")
    other = tmp_path / "w2.safetensors"
    cli("gen-weights", "--config", "tiny", "--seed", "9", "-o", str(other), weights_flag=False)
    c2 = mimi.Codec(other)
    t = mimi.read_tokens(tmp_path / "x.mimi")
    for call in [lambda **k: c2.decode(t, **k), lambda **k: c2.decode_file(t, tmp_path / "y.wav", **k),
                 lambda **k: c2.decode_file(tmp_path / "x.mimi", tmp_path / "y.wav", **k)]:
        with pytest.raises(mimi.WeightsError, match="allow_weights_mismatch=True"):
            call()
        assert not (tmp_path / "y.wav").exists()
        call(allow_weights_mismatch=True)
        (tmp_path / "y.wav").unlink(missing_ok=True)
    for bad in [{"original_samples": -5}, {"original_samples": "x"}, {"sample_rate": 16000}, {"frame_rate": 25}]:
        with pytest.raises(mimi.InputError):
            c2.decode(mimi.Tokens(t.codes, {**t.meta, **bad}), allow_weights_mismatch=True)


def test_a_pickled_codec_loads_the_same_weights_or_refuses(tmp_path, monkeypatch, cli):
    import pickle
    d = tmp_path / "w"
    d.mkdir()
    shutil.copy(weights(), d / "model.safetensors")
    shutil.copy(DATA / "tiny" / "config.json", d / "config.json")
    monkeypatch.chdir(tmp_path)
    c = mimi.Codec("w/model.safetensors", n_q=3)
    blob = pickle.dumps(c)
    monkeypatch.chdir("/")
    c2 = pickle.loads(blob)  # the same file, from another working directory
    assert c2.fingerprint == c.fingerprint and c2.n_q == 3
    cli("gen-weights", "--config", "tiny", "--seed", "11", "-o", str(d / "model.safetensors"), "-f", weights_flag=False)
    with pytest.raises(mimi.WeightsError, match="other weights"):
        pickle.loads(blob)


def test_config_not_beside_the_weights(tmp_path):
    bare = tmp_path / "model.safetensors"
    shutil.copy(weights(), bare)
    with pytest.raises(mimi.WeightsError) as e:
        mimi.Codec(bare)
    assert "--config" not in str(e.value)
    c = mimi.Codec(bare, config=DATA / "tiny" / "config.json")
    x = _speechlike(0.3, 24000).astype(np.float32) / 32768
    assert np.array_equal(c.encode(x), mimi.Codec(weights()).encode(x))


def test_messages_name_python_arguments_not_cli_options(tmp_path, codec):
    import re
    codes = codec.encode(np.zeros(4000, np.float32))
    (tmp_path / "exists.wav").write_bytes(b"x")
    calls = [lambda: codec.decode_file(codes, tmp_path / "exists.wav"),
             lambda: mimi.Codec(tmp_path / "missing.safetensors"),
             lambda: codec.decode_file(codes, tmp_path / "a.ogg", sample_format="s24"),
             lambda: codec.decode_file(codes, tmp_path / "a.wav", sample_rate="abc"),
             lambda: codec.decode_file(codes, tmp_path / "a.wav", sample_rate=5),
             lambda: mimi.Codec(weights(), device="cuda:0"),
             lambda: mimi.Codec(weights(), device="tpu")]
    option = re.compile(r"(^|[\s('\"])--[a-z]")
    for i, call in enumerate(calls):
        with pytest.raises(mimi.Error) as e:
            call()
        assert not option.search(str(e.value)), f"call {i}: {e.value}"
    # a file name that merely holds such text is left as it is
    with pytest.raises(mimi.InputError) as e:
        codec.encode_file(tmp_path / "a--force.wav")
    assert "a--force.wav" in str(e.value)


# --- helper-33's probe: members the CLI's own npy rule refuses, and --recover as recover= ----------

def _forge(d, old, new):
    """The tar of shard 0 with one edit, its .done made to agree (tar_sha256 and record_sha256
    recomputed, as a record written over that tar would say): only the items themselves can tell."""
    import hashlib
    import json
    s = d / "shards" / "shard-00000"
    tar = (s.parent / (s.name + ".tar")).read_bytes()
    new = new + b" " * (len(old) - len(new))  # the same length: only the members can tell
    assert len(new) == len(old)
    b = tar.replace(old, new, 1)
    assert b != tar
    (s.parent / (s.name + ".tar")).write_bytes(b)
    done = s.parent / (s.name + ".done")
    # Numbers keep the literals the CLI wrote: the record's digest is over the CLI's own JSON
    # text, and Python's shortest float repr is not always its library's (a run time written
    # 0.010004043579101563 is 0.010004043579101562 in Python: the same double, another digest).
    class Lit(str):
        pass

    def dump(v):
        if isinstance(v, Lit):
            return str(v)
        if isinstance(v, dict):
            return "{" + ",".join(json.dumps(k) + ":" + dump(v[k]) for k in sorted(v)) + "}"
        if isinstance(v, list):
            return "[" + ",".join(dump(x) for x in v) + "]"
        return json.dumps(v, ensure_ascii=False)

    j = json.loads(done.read_text(), parse_float=Lit)
    j.pop("record_sha256")
    j["tar_sha256"] = hashlib.sha256(b).hexdigest()
    j["record_sha256"] = hashlib.sha256(dump(j).encode()).hexdigest()
    done.write_text(dump(j) + "\n")


def test_read_dataset_refuses_members_the_clis_npy_rule_refuses(tmp_path, dataset_dirs):
    first = next(iter(mimi.read_dataset(dataset_dirs / "out")))
    frames = first.codes.shape[1]
    shape = f"'shape': (8, {frames})".encode()
    edits = [(shape, f"'shape': (8, {frames - 1})".encode()), (shape, f"'shape': (2, {4 * frames})".encode()[: len(shape)]),
             (b"'fortran_order': False", b"'fortran_order': True "), (b"'descr': '<i2'", b"'descr': '>i2'"),
             (b"'descr': '<i2'", b"'descr': '<u2'"), (b"\x93NUMPY\x01\x00", b"\x93NUMPY\x02\x00")]
    for i, (old, new) in enumerate(edits):
        d = tmp_path / f"o{i}"
        shutil.copytree(dataset_dirs / "out", d)
        _forge(d, old, new)
        with pytest.raises(mimi.InputError):
            list(mimi.read_dataset(d))


def test_recover_is_an_argument(tmp_path, codec, cli):
    wav = tmp_path / "x.wav"
    _write_wav(wav, _speechlike(45, 24000), 24000)  # three .mimi chunks of 20 s: a cut leaves good ones
    cli("encode", wav, "-o", tmp_path / "x.mimi")
    b = (tmp_path / "x.mimi").read_bytes()
    rng = np.random.default_rng(2)
    for trial in range(5):
        cut = tmp_path / f"cut{trial}.mimi"
        cut.write_bytes(b[: int(rng.integers(len(b) * 3 // 4, len(b) - 1))])
        with pytest.raises(mimi.InputError) as e:
            mimi.read_tokens(cut)
        assert "--recover" not in str(e.value)
        with pytest.raises(mimi.InputError) as e:
            codec.decode_file(cut, tmp_path / "y.wav")
        assert "--recover" not in str(e.value)
        t = mimi.read_tokens(cut, recover=True)
        assert "damage" in t.meta and "--recover" not in t.meta["damage"]
        want = cli("decode", cut, "-o", tmp_path / "z.wav", "--recover", "-f", check=False)
        if want.returncode == 0:
            assert codec.decode_file(cut, tmp_path / "y.wav", recover=True, force=True) > 0
            assert (tmp_path / "y.wav").read_bytes() == (tmp_path / "z.wav").read_bytes()
        else:
            with pytest.raises(mimi.InputError):
                codec.decode_file(cut, tmp_path / "y.wav", recover=True, force=True)
