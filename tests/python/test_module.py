"""The Python module against the golden vectors, the CLI, and itself (batch, threads, fork, leaks,
bad inputs). Tiny configs: the same code paths as the full model."""
import gc
import importlib.util
import multiprocessing
import os
import threading
import time
import wave

import numpy as np
import pytest

import mimi
from conftest import DATA, weights


def _read_safetensors(path):
    spec = importlib.util.spec_from_file_location("gen_weights", DATA / "gen_weights.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.read_safetensors(path)


def _write_wav(path, pcm_int16, rate):
    """pcm [channels, samples] int16 -> a 16-bit WAV."""
    with wave.open(os.fsdecode(path), "wb") as w:
        w.setnchannels(pcm_int16.shape[0])
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.ascontiguousarray(pcm_int16.T).tobytes())


def _speechlike(seconds, rate, channels=1, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    x = np.stack([0.3 * np.sin(2 * np.pi * (180 + 40 * c) * t * (1 + 0.2 * np.sin(3 * t))) + 0.02 * rng.standard_normal(t.size)
                  for c in range(channels)])
    return (x * 32767).astype(np.int16)


# --- golden parity (the official implementation's outputs, tests/data) --------------------------

@pytest.mark.parametrize("config", ["tiny", "tiny-window"])
def test_golden(config):
    codec = mimi.Codec(weights(config), n_q=8)
    cases = sorted(p for p in (DATA / config / "cases").glob("*.safetensors") if "streaming" not in p.name)
    assert cases
    hard = 0
    for path in cases:
        g, _ = _read_safetensors(path)
        codes = codec.encode(g["input"][0], sample_rate=24000)
        gc_ = g["codes"][0]
        assert codes.shape == gc_.shape and codes.dtype == np.int64
        margin = g["code_margin"][0]
        for f in range(codes.shape[1]):  # a differing code is allowed only at a near tie (as test_golden)
            for lo, hi in ((0, 1), (1, codes.shape[0])):
                diff = np.nonzero(codes[lo:hi, f] != gc_[lo:hi, f])[0]
                if diff.size and margin[lo + diff[0], f] >= 1e-4:
                    hard += 1
        y = codec.decode(gc_)
        want = g["output"][0]
        assert y.shape == want.shape and y.dtype == np.float32
        tol = 1e-4 * np.abs(want).max() + 1e-5
        assert np.abs(y - want).max() <= tol, path.name
    assert hard == 0


# --- the CLI: the same codes, the same files --------------------------------------------------------

@pytest.mark.parametrize("rate,channels", [(24000, 1), (16000, 2), (44100, 1)])
def test_encode_matches_cli(tmp_path, codec, cli, rate, channels):
    pcm = _speechlike(2.3, rate, channels)
    wav = tmp_path / "a.wav"
    _write_wav(wav, pcm, rate)
    cli("encode", wav, "-o", tmp_path / "a.npy", "--n-q", "8")
    want = np.load(tmp_path / "a.npy")
    assert np.array_equal(codec.encode_file(wav), want)
    assert np.array_equal(codec.encode_file(str(wav).encode()), want)  # paths as bytes
    # the array path: the same samples give the same codes (int16 scaled as libsndfile reads them)
    assert np.array_equal(codec.encode(pcm, sample_rate=rate), want)
    assert np.array_equal(codec.encode(pcm.astype(np.float32) / 32768, sample_rate=rate), want)


def test_decode_file_matches_cli(tmp_path, codec, cli):
    wav = tmp_path / "a.wav"
    _write_wav(wav, _speechlike(1.7, 24000), 24000)
    cli("encode", wav, "-o", tmp_path / "a.mimi")
    cli("decode", tmp_path / "a.mimi", "-o", tmp_path / "cli.wav")
    n = codec.decode_file(tmp_path / "a.mimi", tmp_path / "py.wav")
    assert (tmp_path / "py.wav").read_bytes() == (tmp_path / "cli.wav").read_bytes()
    assert n == int(1.7 * 24000)
    with pytest.raises(mimi.OutputError):  # exists: only with force, as the CLI
        codec.decode_file(tmp_path / "a.mimi", tmp_path / "py.wav")
    codec.decode_file(tmp_path / "a.mimi", tmp_path / "py.wav", force=True)
    # codes with a length: the decode() samples, trimmed, written as s16
    codes = mimi.read_tokens(tmp_path / "a.mimi").codes
    codec.decode_file(codes, tmp_path / "c.wav", length=40795)
    with wave.open(str(tmp_path / "c.wav")) as w:
        assert w.getnframes() == 40795 and w.getframerate() == 24000
    with pytest.raises(mimi.UsageError):  # 21 frames' worth: not what 22 frames were encoded from
        codec.decode_file(codes, tmp_path / "d.wav", length=21 * 1920)


@pytest.mark.parametrize("ext", [".mimi", ".npy", ".safetensors", ".txt"])
def test_read_tokens_every_format(tmp_path, codec, cli, ext):
    wav = tmp_path / "a.wav"
    _write_wav(wav, _speechlike(1.1, 24000), 24000)
    cli("encode", wav, "-o", tmp_path / ("a" + ext), "--n-q", "5")
    t = mimi.read_tokens(tmp_path / ("a" + ext))
    assert t.codes.dtype == np.int64 and t.codes.shape[0] == 5
    assert np.array_equal(t.codes, codec.encode_file(wav, n_q=5))
    assert isinstance(t.meta, dict)
    if ext == ".mimi":
        assert t.meta["original_samples"] == int(1.1 * 24000)


@pytest.mark.parametrize("width,dtype", [(1, np.uint8), (4, np.int32)])
def test_integer_pcm_as_libsndfile(tmp_path, codec, cli, width, dtype):
    x = _speechlike(1.2, 24000).astype(np.float64) / 32768
    if dtype == np.uint8:
        pcm = np.clip(np.round(x * 127) + 128, 0, 255).astype(np.uint8)
    else:
        pcm = np.round(x * (2**31 - 1)).astype(np.int32)
    with wave.open(str(tmp_path / "a.wav"), "wb") as w:  # 8-bit WAV is unsigned, 32-bit signed
        w.setnchannels(1)
        w.setsampwidth(width)
        w.setframerate(24000)
        w.writeframes(pcm.tobytes())
    cli("encode", tmp_path / "a.wav", "-o", tmp_path / "a.npy")
    assert np.array_equal(codec.encode(pcm), np.load(tmp_path / "a.npy"))


def test_properties_and_dash(tmp_path, codec, cli, monkeypatch):
    assert (codec.sample_rate, codec.frame_rate, codec.frame_size, codec.max_n_q, codec.bins) == (24000, 12.5, 1920, 8, 64)
    assert codec.weights_path == weights() and codec.device.startswith("cpu")
    _write_wav(tmp_path / "p.wav", _speechlike(0.3, 24000), 24000)
    cli("encode", tmp_path / "p.wav", "-o", tmp_path / "p.mimi")
    assert codec.fingerprint == mimi.read_tokens(tmp_path / "p.mimi").meta["weights_fingerprint"]
    monkeypatch.chdir(tmp_path)
    codec.decode_file(codec.encode(_speechlike(0.2, 24000)), "-")  # a file named "-", not stdout
    assert (tmp_path / "-").stat().st_size > 44
    folder = tmp_path / "w"  # a folder holding model.safetensors, found as the CLI finds it
    folder.mkdir()
    (folder / "model.safetensors").symlink_to(weights())
    (folder / "config.json").symlink_to(DATA / "tiny" / "config.json")
    monkeypatch.setenv("MIMI_WEIGHTS", str(folder))
    assert mimi.Codec().fingerprint == codec.fingerprint
    assert mimi.Codec(folder, cache=False).fingerprint == codec.fingerprint


def test_non_utf8_path(tmp_path, codec):
    name = os.fsencode(tmp_path) + b"/\xff\xfe.wav"
    _write_wav(name, _speechlike(0.5, 24000), 24000)
    assert codec.encode_file(name).shape == (8, 7)
    with pytest.raises(mimi.InputError) as e:
        codec.encode_file(os.fsencode(tmp_path) + b"/\xff-missing.wav")
    assert b"/\xff-missing.wav" in os.fsencode(str(e.value))  # the name's bytes, as given


# --- batch, streams of calls, threads, fork, memory --------------------------------------------------

def test_batch_equals_single(codec):
    items = [_speechlike(s, 24000, seed=i).astype(np.float32) / 32768 for i, s in enumerate([0.3, 1.0, 2.2, 0.08])]
    alone = [codec.encode(x) for x in items]
    for slots in (1, 2, 8):
        got = codec.encode_batch(items, slots=slots)
        assert len(got) == len(items) and all(np.array_equal(a, b) for a, b in zip(got, alone))
    at16 = [_speechlike(s, 16000, channels=2, seed=i) for i, s in enumerate([0.5, 1.3])]
    assert all(np.array_equal(a, codec.encode(x, 16000)) for a, x in zip(codec.encode_batch(at16, 16000), at16))
    assert codec.encode_batch([]) == []
    with pytest.raises(mimi.InputError):  # one bad item: the call fails, naming it
        codec.encode_batch([items[0], np.array([0.0, np.nan], np.float32)])
    same = np.stack([items[1], items[1] * 0.5])  # [B, C = 1, T]
    out = codec.encode(same)
    assert out.shape == (2, 8, alone[1].shape[1])
    assert np.array_equal(out[0], alone[1]) and np.array_equal(out[1], codec.encode(items[1] * 0.5))
    y = codec.decode(out)
    assert y.shape == (2, 1, out.shape[2] * 1920)
    assert np.array_equal(y[0], codec.decode(out[0]))


def test_decode_length_and_n_q(codec):
    codes = codec.encode(_speechlike(1.0, 24000))
    full = codec.decode(codes)
    assert full.shape == (1, codes.shape[1] * 1920)
    assert np.array_equal(codec.decode(codes, length=24000), full[:, :24000])
    four = codec.decode(codes, n_q=4)
    assert np.array_equal(four, codec.decode(codes[:4]))
    assert np.array_equal(codec.encode(_speechlike(1.0, 24000), n_q=3), codes[:3])
    with pytest.raises(mimi.UsageError):
        codec.decode(codes, length=codes.shape[1] * 1920 + 1)


def test_pickle_and_spawn(codec):
    import pickle
    x = _speechlike(0.9, 24000)
    again = pickle.loads(pickle.dumps(codec))
    assert again.n_q == codec.n_q and again.fingerprint == codec.fingerprint
    assert np.array_equal(again.encode(x), codec.encode(x))
    with multiprocessing.get_context("spawn").Pool(1) as pool:  # a codec sent to a spawned worker
        got = pool.apply_async(_encode_with, (codec, x)).get(timeout=120)
    assert np.array_equal(got, codec.encode(x))


def _encode_with(c, x):
    return c.encode(x)


def test_gil_released_while_computing(codec):
    x = _speechlike(40.0, 24000)
    codec.encode(x)  # plans made
    stamps, stop = [], threading.Event()

    def spin():
        while not stop.is_set():
            stamps.append(time.perf_counter())
            time.sleep(0.0005)

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.02)
    t0 = time.perf_counter()
    codec.encode(x)
    t1 = time.perf_counter()
    stop.set()
    t.join()
    inside = [s for s in stamps if t0 + 0.2 * (t1 - t0) < s < t1 - 0.2 * (t1 - t0)]
    assert t1 - t0 > 0.02 and len(inside) >= 5  # the other thread ran during the call


def test_threads_share_a_codec(codec):
    items = [_speechlike(0.7, 24000, seed=i) for i in range(8)]
    want = [codec.encode(x) for x in items]
    got = [None] * len(items)

    def work(i):
        got[i] = codec.encode(items[i])

    ts = [threading.Thread(target=work, args=(i,)) for i in range(len(items))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert all(np.array_equal(a, b) for a, b in zip(got, want))


def _child_encode(args):
    w, x = args
    return mimi.Codec(w, n_q=8, threads=2).encode(x)


_INHERITED = {}


def _child_inherited(x):
    """In a forked child: the parent's own codec, and a stream made from it."""
    c = _INHERITED["codec"]
    enc = c.stream_encoder()
    return c.encode(x), np.concatenate([enc.feed(x), enc.flush()], axis=1)


def test_fork_after_use(codec):
    x = _speechlike(1.5, 24000)
    want = codec.encode(x)  # the parent has computed (and started its threads) before forking
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(2) as pool:
        res = pool.map_async(_child_encode, [(weights(), x)] * 3)
        got = res.get(timeout=120)  # a hung child fails here instead of hanging the suite
    assert all(np.array_equal(g, want) for g in got)
    _INHERITED["codec"] = mimi.Codec(weights(), n_q=8, threads=2)
    _INHERITED["codec"].encode(x)
    with ctx.Pool(2) as pool:
        got = pool.map_async(_child_inherited, [x] * 3).get(timeout=120)
    assert all(np.array_equal(a, want) and np.array_equal(b, want) for a, b in got)
    # and the parent's own codec still works
    assert np.array_equal(codec.encode(x), want)


def _rss_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_no_growth_over_10000_calls(codec):
    x = _speechlike(0.08, 24000)  # one frame
    for _ in range(200):
        codec.decode(codec.encode(x))
    gc.collect()
    before = _rss_kb()
    for _ in range(10000):
        codec.decode(codec.encode(x))
    gc.collect()
    assert _rss_kb() - before < 8 * 1024  # KB: nothing kept per call


# --- inputs: converted or refused, never misread or modified ------------------------------------------

def test_inputs_not_modified_and_strided(codec):
    x = _speechlike(1.0, 24000, channels=2).astype(np.float32) / 32768
    keep = x.copy()
    a = codec.encode(x)
    assert np.array_equal(x, keep)
    assert np.array_equal(codec.encode(x[:, ::1].copy(order="F")), a)  # Fortran order
    wide = np.zeros((2, x.shape[1] * 2), np.float32)
    wide[:, ::2] = x
    assert np.array_equal(codec.encode(wide[:, ::2]), a)  # a strided view
    assert np.array_equal(codec.encode(x.astype(np.float64)), a)
    assert np.array_equal(codec.encode(list(x[0])), codec.encode(x[0]))
    codes = codec.encode(x)
    ck = codes.copy()
    wide = np.zeros((8, codes.shape[1] * 2), np.int64)
    wide[:, ::2] = codes
    assert np.array_equal(codec.decode(wide[:, ::2]), codec.decode(codes))  # strided codes
    assert np.array_equal(codes, ck)
    assert np.array_equal(codec.decode(codes.astype(">i4")), codec.decode(codes))  # big-endian
    assert np.array_equal(codec.encode(x.astype(">f4")), a)
    assert np.array_equal(codec.decode(codes.astype(np.int16)), codec.decode(codes))


class _DLPackOnly:
    """An array offered through DLPack alone (no __array__), as a torch tensor can be."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_dlpack_and_torch(codec):
    x = _speechlike(0.5, 24000).astype(np.float32) / 32768
    assert np.array_equal(codec.encode(_DLPackOnly(x)), codec.encode(x))
    torch = pytest.importorskip("torch")
    assert np.array_equal(codec.encode(torch.from_numpy(x)), codec.encode(x))


@pytest.mark.parametrize("bad,err", [
    (np.zeros((1, 100), np.complex64), mimi.UsageError),
    (np.zeros((1, 100), bool), mimi.UsageError),
    (np.array(["a", "b"]), mimi.UsageError),
    (np.zeros((2, 3, 4, 5), np.float32), mimi.UsageError),
    (np.zeros((1, 0), np.float32), mimi.UsageError),
    (np.zeros((0, 100), np.float32), mimi.UsageError),
    (np.float32(3.0), mimi.UsageError),
    ("not audio", mimi.UsageError),
    (np.array([[0.1, np.nan, 0.2]], np.float32), mimi.InputError),
    (np.array([[0.1, np.inf]], np.float64), mimi.InputError),
])
def test_bad_audio(codec, bad, err):
    with pytest.raises(err):
        codec.encode(bad)


def test_bad_codes_and_options(codec):
    codes = codec.encode(_speechlike(0.3, 24000))
    for bad in (codes.astype(np.float32), codes[0], codes[None, None]):
        with pytest.raises(mimi.UsageError):
            codec.decode(bad)
    big = codes.copy()
    big[2, 1] = 2048  # the tiny model has 64 bins: any code >= 64 is not one
    with pytest.raises(mimi.InputError):
        codec.decode(big)
    neg = codes.copy()
    neg[0, 0] = -1
    with pytest.raises(mimi.InputError):
        codec.decode(neg)
    huge = codes.copy()
    huge[0, 0] = 2**40
    with pytest.raises(mimi.InputError):
        codec.decode(huge)
    audio = _speechlike(0.3, 24000).astype(np.float32) / 32768
    for rate in (0, 16, 999, 768001, 2**40):  # a rate in kHz by mistake, or none at all
        with pytest.raises(mimi.UsageError, match="sample_rate"):
            codec.encode(audio, sample_rate=rate)
    with pytest.raises(mimi.UsageError, match="transpose"):  # [samples, channels] as soundfile gives it
        codec.encode(np.zeros((24000, 2), np.float32))
    for n_q in (0, -1, 9):
        with pytest.raises(mimi.UsageError):
            codec.decode(codes, n_q=n_q)
    with pytest.raises(mimi.UsageError):
        codec.encode(_speechlike(0.3, 24000), n_q=99)
    with pytest.raises(mimi.UsageError):
        mimi.Codec(weights(), n_q=0)
    with pytest.raises(mimi.UsageError):
        codec.decode_file(codes, "/tmp/x.wav", sample_format="s8")


def test_errors_are_the_clis(tmp_path, cli):
    with pytest.raises(mimi.WeightsError) as e:
        mimi.Codec(tmp_path / "nowhere.safetensors")
    assert e.value.exit_code == 4 and isinstance(e.value, mimi.Error)
    r = cli("encode", tmp_path / "missing.wav", check=False)
    assert r.returncode == 3
    with pytest.raises(mimi.InputError) as e:
        mimi.Codec(weights()).encode_file(tmp_path / "missing.wav")
    assert str(e.value) in r.stderr.decode()
    with pytest.raises(mimi.DeviceError):
        mimi.Codec(weights(), device="cuda:7")
    with pytest.raises(mimi.UsageError):
        mimi.Codec(weights(), device="tpu")


# --- streams -------------------------------------------------------------------------------------

@pytest.mark.parametrize("rate", [24000, 16000])
def test_stream_encoder_equals_offline(codec, rate):
    x = _speechlike(3.3, rate, channels=2)
    want = codec.encode(x, sample_rate=rate)
    rng = np.random.default_rng(3)
    for _ in range(2):  # twice: flush() starts the stream anew
        enc = codec.stream_encoder(sample_rate=rate)
        cuts = np.sort(rng.integers(0, x.shape[1], 12))
        parts = [enc.feed(p) for p in np.split(x, cuts, axis=1)] + [enc.flush()]
        assert all(p.shape[0] == 8 for p in parts)
        assert np.array_equal(np.concatenate(parts, axis=1), want)
    enc.feed(x[:, :5000])
    enc.reset()
    assert np.array_equal(np.concatenate([enc.feed(x), enc.flush()], axis=1), want)


def test_stream_decoder(codec):
    codes = codec.encode(_speechlike(2.0, 24000))
    want = codec.decode(codes)
    dec = codec.stream_decoder()
    parts = [dec.feed(codes[:, :3]), dec.feed(codes[:, 3]), dec.feed(codes[:, 4:])]
    y = np.concatenate(parts, axis=1)
    assert y.shape == want.shape
    assert np.abs(y - want).max() <= 1e-5 * max(1.0, np.abs(want).max())
    dec.reset()
    assert np.array_equal(np.concatenate([dec.feed(codes[:, :3]), dec.feed(codes[:, 3:])], axis=1), y)
    with pytest.raises(mimi.InputError):  # refused before anything is decoded: the stream goes on
        dec.feed(np.concatenate([codes[:, :2], np.full((8, 1), 64)], axis=1))
    dec.reset()
    dec.feed(codes[:, :3])
    with pytest.raises(mimi.InputError):
        dec.feed(np.concatenate([codes[:, 3:5], np.full((8, 1), -1)], axis=1))
    assert np.array_equal(np.concatenate([dec.feed(codes[:, :0] if False else codes[:, 3:])], axis=1), y[:, 3 * 1920:])
    assert dec.feed(np.zeros((4, 0), np.int64)).shape == (1, 0)


def test_stream_encoder_refused_feed_has_no_effect(codec):
    # a feed refused for its samples (NaN, +-Inf anywhere in it, any piece size, mono or stereo)
    # leaves the stream as it was: the stream's codes are still encode()'s of the good samples
    rng = np.random.default_rng(5)
    x = _speechlike(1.0, 24000).astype(np.float32) / 32768
    want = codec.encode(x)
    for trial in range(6):
        enc = codec.stream_encoder()
        cuts = np.sort(rng.choice(np.arange(1, x.shape[1]), size=3, replace=False))
        got = []
        for a, b in zip([0, *cuts], [*cuts, x.shape[1]]):
            n = int(rng.integers(1, 5000))
            bad = np.repeat(x[:, :n], 1 + trial % 2, axis=0).copy()
            bad[int(rng.integers(0, bad.shape[0])), int(rng.integers(0, n))] = [np.nan, np.inf, -np.inf][trial % 3]
            with pytest.raises(mimi.InputError):
                enc.feed(bad)
            got.append(enc.feed(x[:, a:b]))
        got.append(enc.flush())
        assert np.array_equal(np.concatenate(got, axis=1), want), f"trial {trial}, cuts {cuts}"


# --- a `mimi dataset` output -------------------------------------------------------------------------

def test_read_dataset(tmp_path, codec, cli):
    wavs = tmp_path / "wavs"
    wavs.mkdir()
    for i, s in enumerate([0.4, 1.3, 2.2, 0.9, 1.7]):
        rate = 24000 if i % 2 else 16000
        _write_wav(wavs / f"utt{i}.wav", _speechlike(s, rate, seed=i), rate)
    cli("dataset", "plan", wavs, "-o", f"{tmp_path}/plan/", "--shards", "2", weights_flag=False)
    out = f"{tmp_path}/out/"
    cli("dataset", "encode", "--plan", f"{tmp_path}/plan/", "--shard", "0/2", "-o", out)
    first = list(mimi.read_dataset(out))  # shard 1 not encoded yet: shard 0's items only
    cli("dataset", "encode", "--plan", f"{tmp_path}/plan/", "--shard", "1/2", "-o", out)
    items = list(mimi.read_dataset(out))
    assert 0 < len(first) < len(items) == 5
    assert [i.key for i in items[: len(first)]] == [i.key for i in first]
    assert sorted(i.key for i in items) == [f"utt{i}" for i in range(5)]
    for it in items:
        assert it.codes.dtype == np.int64 and it.codes.shape[0] == 8
        assert np.array_equal(it.codes, codec.encode_file(wavs / (it.key + ".wav")))
        assert it.meta["frames"] == it.codes.shape[1]
    with pytest.raises(mimi.InputError):
        list(mimi.read_dataset(tmp_path))  # not an output
