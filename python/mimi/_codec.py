"""mimi.Codec and read_tokens: the Python face of mimi._mimi (python/src/)."""

import json
import os
from typing import NamedTuple

import numpy as np

from . import _mimi
from ._errors import UsageError, WeightsError

# libsndfile's scale for integer PCM read as float (what `mimi encode` of a WAV of those samples
# sees): x / 2^(bits - 1); unsigned 8-bit is offset by 128 first.
_INT_SCALE = {np.dtype(np.int8): 2.0**-7, np.dtype(np.int16): 2.0**-15, np.dtype(np.int32): 2.0**-31}


def _path(p):
    """A path as the bytes the OS uses (file names are bytes: never assumed UTF-8). "-" is a
    file of that name here, not stdin/stdout as on the command line."""
    try:
        b = os.fsencode(os.fspath(p))
    except TypeError:
        raise UsageError(f"a path must be str, bytes or os.PathLike, not {type(p).__name__}") from None
    if not b:
        raise UsageError("a path must not be empty")
    if b"\0" in b:  # the OS would read it only up to there: another file
        raise UsageError(f"{os.fsdecode(b)!r}: a path must not hold a NUL byte")
    return b"./-" if b == b"-" else b


def _flag(name, v):
    """A switch: True/False (or numpy's bool). A string such as "no" is refused, not taken as True."""
    if not isinstance(v, (bool, np.bool_)):
        raise UsageError(f"{name} must be True or False, not {v!r}")
    return bool(v)


def _rate(sample_rate):
    """An integer rate that fits the engine's int (the engine checks the range: 1000..768000)."""
    if not isinstance(sample_rate, (int, np.integer)) or isinstance(sample_rate, bool):
        raise UsageError(f"sample_rate must be an integer number of Hz, not {sample_rate!r}")
    if not 0 < sample_rate < 2**31:
        raise UsageError(f"sample_rate {sample_rate} Hz is outside 1000..768000")
    return int(sample_rate)


def _as_array(x, what):
    """numpy view or copy of an array-like: numpy arrays, anything with __array__ or the array
    interface (torch CPU tensors), or DLPack. Never modifies x."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__array__") or hasattr(x, "__array_interface__"):
        try:
            return np.asarray(x)
        except Exception as e:  # e.g. a CUDA tensor: numpy cannot see it
            if not hasattr(x, "__dlpack__"):
                raise UsageError(f"{what}: cannot be read as an array ({e})") from None
    if hasattr(x, "__dlpack__"):
        try:
            return np.from_dlpack(x)
        except Exception as e:
            raise UsageError(f"{what}: cannot be read through DLPack on the CPU ({e}); move it to the CPU first") from None
    if isinstance(x, (list, tuple)):
        try:
            return np.asarray(x)
        except ValueError as e:  # ragged nesting, or values numpy cannot hold together
            raise UsageError(f"{what}: a list that is not one array ({e})") from None
    raise UsageError(f"{what}: expected an array (numpy, torch CPU tensor, DLPack), not {type(x).__name__}")


def _audio_float32(a, what):
    """Samples as float32 in the scale a float WAV holds (integers scaled as libsndfile does)."""
    if not a.dtype.isnative:  # big-endian data: the same values in this machine's byte order
        a = a.astype(a.dtype.newbyteorder("="))
    if a.dtype == np.float32:
        return a
    if a.dtype in (np.float64, np.float16):
        return a.astype(np.float32)
    if a.dtype in _INT_SCALE:
        return (a.astype(np.float64) * _INT_SCALE[a.dtype]).astype(np.float32)
    if a.dtype == np.uint8:
        return ((a.astype(np.float64) - 128.0) * 2.0**-7).astype(np.float32)
    raise UsageError(f"{what}: samples of dtype {a.dtype} (use float32, float64, float16, int8, uint8, int16 or int32)")


def _codes_int64(c, what):
    c = _as_array(c, what)
    if c.dtype.kind not in "iu":
        raise UsageError(f"{what}: codes must be integers, not {c.dtype}")
    if not c.dtype.isnative:
        c = c.astype(c.dtype.newbyteorder("="))
    if c.dtype.kind == "u" and c.dtype.itemsize == 8 and c.size and c.max() > np.iinfo(np.int64).max:
        raise UsageError(f"{what}: a code does not fit int64")
    return np.ascontiguousarray(c, dtype=np.int64)


class Tokens(NamedTuple):
    """A token file's codes [n_q, frames] (int64) and its metadata (dict: sample_rate,
    frame_rate, original_samples, weights_fingerprint... as `mimi info` shows them)."""

    codes: np.ndarray
    meta: dict


def _tokens_parts(x):
    """(codes, the metadata as JSON text) of Tokens; (x, "") of anything else."""
    if not isinstance(x, Tokens):
        return x, ""
    if not isinstance(x.meta, dict):
        raise UsageError(f"tokens: meta must be a dict (as read_tokens gives it), not {type(x.meta).__name__}")
    try:
        return x.codes, json.dumps(x.meta)
    except (TypeError, ValueError) as e:
        raise UsageError(f"tokens: meta is not JSON data ({e})") from None


def read_tokens(path, recover=False) -> Tokens:
    """Reads a token file in any format `mimi encode` writes (.mimi, .npy, .safetensors, text),
    with the CLI's checks: a damaged file raises mimi.InputError; with recover=True a damaged or
    truncated .mimi or text file gives its good frames (meta["damage"] says what was cut), as the
    CLI's --recover."""
    codes, meta = _mimi.read_tokens(_path(path), _flag("recover", recover))
    return Tokens(codes, json.loads(meta))


class Codec:
    """A loaded Mimi model on a device.

    weights: a model.safetensors file (or a folder holding one); None: $MIMI_WEIGHTS, then the
    Hugging Face cache (kyutai/mimi), as the CLI finds them. config: the model's config.json when
    it is not beside the weights (as the CLI's --config). n_q: codebooks to encode with
    (1..32). device: "cpu", or "cuda[:i]" / "hip[:i]" in a GPU build. threads: CPU threads (0:
    all this process may use; the kernels' thread count is one per process). cache: use the
    prepared-weights cache as the CLI does.

    Thread safety: calls on one Codec from several Python threads run one at a time (the GIL is
    released while they compute); for parallel work use one Codec per thread or per process.
    After os.fork() (datasets.map(num_proc=N), DataLoader workers) the child computes on one
    thread.
    """

    def __init__(self, weights=None, n_q=8, device="cpu", threads=0, cache=True, config=None):
        if not isinstance(n_q, (int, np.integer)) or isinstance(n_q, bool):
            raise UsageError(f"n_q must be an integer, not {type(n_q).__name__}")
        if not isinstance(threads, (int, np.integer)) or isinstance(threads, bool) or threads < 0:
            raise UsageError(f"threads must be an integer >= 0, not {threads!r}")
        if not isinstance(device, str):
            raise UsageError(f"device must be a string such as 'cpu' or 'cuda:0', not {type(device).__name__}")
        cache = _flag("cache", cache)
        if _mimi._forked_child():
            threads = 1
        config = b"" if config is None else _path(config)
        self._c = _mimi._Codec(b"" if weights is None else _path(weights), config, device,
                               int(min(threads, 1 << 16)), not cache)
        self.n_q = n_q  # (checked by the setter)
        # what a pickle carries: the files as absolute paths (a worker may run elsewhere), and the
        # fingerprint they had, so that other weights under the same name are refused, not used
        self._args = (os.path.abspath(self._c.weights_path), os.path.abspath(config) if config else None, device,
                      int(threads), cache, self._c.fingerprint)

    def __reduce__(self):
        # Pickled (a datasets.map function or a DataLoader dataset holding a codec, sent to
        # spawned workers): the worker loads the same weights file again (not the lookup again).
        return (_unpickle_codec, (*self._args, self.n_q))

    # --- properties -------------------------------------------------------------------------
    @property
    def n_q(self):
        """codebooks encode() and the streams use when a call names none (1..max_n_q)"""
        return self._default_n_q

    @n_q.setter
    def n_q(self, value):
        self._default_n_q = self._n_q(value, default=False)

    sample_rate = property(lambda self: self._c.sample_rate, doc="the model's sample rate (24000)")
    frame_rate = property(lambda self: self._c.frame_rate, doc="frames per second (12.5)")
    frame_size = property(lambda self: self._c.frame_size, doc="samples per frame (1920)")
    max_n_q = property(lambda self: self._c.max_n_q, doc="codebooks the model has (32)")
    bins = property(lambda self: self._c.bins, doc="entries per codebook (2048)")
    fingerprint = property(lambda self: self._c.fingerprint, doc="the weights' fingerprint, as token files record it")
    device = property(lambda self: self._c.device, doc="where it computes")
    weights_path = property(lambda self: os.fsdecode(self._c.weights_path), doc="the weights file in use")

    def __repr__(self):
        return f"mimi.Codec(weights={self.weights_path!r}, n_q={self.n_q}, device={self.device!r})"

    def _n_q(self, n_q, default=True):
        if n_q is None and default:
            return self.n_q
        if not isinstance(n_q, (int, np.integer)) or isinstance(n_q, bool):
            raise UsageError(f"n_q must be an integer, not {type(n_q).__name__}")
        if not 1 <= n_q <= self.max_n_q:
            raise UsageError(f"n_q must be in 1..{self.max_n_q}, not {n_q}")
        return int(n_q)

    # --- arrays -----------------------------------------------------------------------------
    def encode(self, audio, sample_rate=24000, n_q=None):
        """Audio [samples], [channels, samples] or [batch, channels, samples] -> codes [n_q,
        frames] (int64), or [batch, n_q, frames]. Channels are averaged and the audio resampled
        to 24 kHz with soxr, exactly as `mimi encode` treats a file of those samples."""
        n_q = self._n_q(n_q)
        rate = _rate(sample_rate)
        a = _as_array(audio, "audio")
        if a.ndim == 1:
            a = a[None, :]
        if a.ndim == 3:
            out = [self._encode_one(a[i], rate, n_q, f"audio[{i}]")[0] for i in range(a.shape[0])]
            if not out:
                raise UsageError("audio: an empty batch")
            return np.stack(out)
        if a.ndim != 2:
            raise UsageError(f"audio: expected [samples], [channels, samples] or [batch, channels, samples], not shape {a.shape}")
        return self._encode_one(a, rate, n_q, "audio")[0]

    def _encode_one(self, a, rate, n_q, what):
        if a.shape[0] == 0:
            raise UsageError(f"{what}: no channels (shape {a.shape}; audio is [channels, samples])")
        if a.shape[1] == 0:
            raise UsageError(f"{what}: no samples")
        pcm = np.ascontiguousarray(_audio_float32(a, what).T)  # [samples, channels]: interleaved
        return self._c.encode_pcm(pcm, rate, n_q, what)

    def encode_batch(self, audios, sample_rate=24000, n_q=None, slots=8):
        """A list of audio arrays (ragged lengths, each [samples] or [channels, samples]) -> a
        list of codes, encoded `slots` at a time in the slots of one batched plan (as `mimi
        encode --batch`); each is exactly what encode() gives that item alone."""
        n_q = self._n_q(n_q)
        rate = _rate(sample_rate)
        if not isinstance(slots, (int, np.integer)) or isinstance(slots, bool) or slots < 1:
            raise UsageError(f"slots must be an integer >= 1, not {slots!r}")
        pcm = []
        for i, x in enumerate(audios):
            what = f"audio[{i}]"
            a = _as_array(x, what)
            if a.ndim == 1:
                a = a[None, :]
            if a.ndim != 2:
                raise UsageError(f"{what}: expected [samples] or [channels, samples], not shape {a.shape}")
            if a.shape[0] == 0 or a.shape[1] == 0:
                raise UsageError(f"{what}: no {'channels' if a.shape[0] == 0 else 'samples'}")
            pcm.append(np.ascontiguousarray(_audio_float32(a, what).T))
        if not pcm:
            return []
        return self._c.encode_batch(pcm, rate, n_q, min(int(slots), 1024))

    def decode(self, codes, length=None, n_q=None, allow_weights_mismatch=False):
        """Codes [n_q, frames] (or [batch, n_q, frames]) -> float32 audio [1, samples] at 24 kHz
        (or [batch, 1, samples]): frames x 1920 samples, or the first `length` of them. Tokens
        (read_tokens) are held to the model as their file is (other weights: WeightsError unless
        allow_weights_mismatch) and trimmed to the length it records, as decode_file does."""
        allow = _flag("allow_weights_mismatch", allow_weights_mismatch)
        codes, meta = _tokens_parts(codes)
        c = _codes_int64(codes, "codes")
        if c.ndim == 3 and not meta:
            if c.shape[0] == 0:
                raise UsageError("codes: an empty batch")
            return np.stack([self.decode(c[i], length, n_q) for i in range(c.shape[0])])
        if c.ndim != 2:
            raise UsageError(f"codes: expected [n_q, frames] or [batch, n_q, frames], not shape {c.shape}")
        y, recorded = self._c.decode_codes(c, 0 if n_q is None else self._n_q(n_q), meta, allow)
        if length is None and recorded > 0:
            length = recorded
        if length is not None:
            if not isinstance(length, (int, np.integer)) or isinstance(length, bool) or not 0 < length <= y.shape[0]:
                raise UsageError(f"length must be an integer in 1..{y.shape[0]} for {c.shape[1]} frames, not {length!r}")
            y = y[: int(length)]
        return y[None, :]

    # --- streams ----------------------------------------------------------------------------
    def stream_encoder(self, sample_rate=24000, n_q=None):
        """A StreamEncoder: feed(audio) returns the codes of the frames completed so far,
        flush() those of the last, zero-padded frame. The codes of a whole stream are exactly
        encode()'s of the same samples."""
        return StreamEncoder(_mimi._StreamEncoder(self._c, _rate(sample_rate), self._n_q(n_q)), self._c.max_n_q)

    def stream_decoder(self, n_q=None):
        """A StreamDecoder: feed(codes [n_q, frames]) returns their audio [1, frames * 1920],
        frame by frame as `mimi decode --stream` (equal to decode()'s within float rounding:
        the offline decoder runs in longer chunks)."""
        return StreamDecoder(_mimi._StreamDecoder(self._c, 0 if n_q is None else self._n_q(n_q)))

    # --- files (the CLI's own readers and writers) ------------------------------------------
    def encode_file(self, path, n_q=None):
        """An audio file (anything `mimi encode` reads) -> codes [n_q, frames], bit-identical to
        `mimi encode FILE`."""
        codes, _samples, _rate, _channels = self._c.encode_file(_path(path), self._n_q(n_q))
        return codes

    def decode_file(self, codes_or_path, out_path, n_q=None, length=None, force=False, sample_format="s16",
                    sample_rate=None, allow_weights_mismatch=False, recover=False):
        """A token file (path), Tokens or codes [n_q, frames] -> an audio file (WAV, FLAC or OGG
        by the extension), written as `mimi decode` writes it (atomically; an existing file only
        with force, never the token file itself). A token file is trimmed to the length it
        records, codes to `length` samples (the length of the audio they were encoded from, as a
        token file records it). A token file made with other weights is refused (WeightsError)
        unless allow_weights_mismatch; a damaged or truncated one is refused unless recover (its good
        frames are decoded, as the CLI's --recover). Returns the number of samples written."""
        force, allow = _flag("force", force), _flag("allow_weights_mismatch", allow_weights_mismatch)
        recover = _flag("recover", recover)
        fmt = str(sample_format)
        rate = "" if sample_rate is None else str(sample_rate)
        nq = 0 if n_q is None else self._n_q(n_q)
        if isinstance(codes_or_path, (str, bytes, os.PathLike)):
            if length is not None:
                raise UsageError("length applies to codes; a token file is trimmed to the length it records")
            return self._c.decode_file(_path(codes_or_path), _path(out_path), nq, force, fmt, rate, allow, recover)
        codes, meta = _tokens_parts(codes_or_path)
        c = _codes_int64(codes, "codes")
        if c.ndim != 2:
            raise UsageError(f"codes: expected [n_q, frames], not shape {c.shape}")
        if length is not None:
            frames, fs = c.shape[1], self.frame_size
            if (not isinstance(length, (int, np.integer)) or isinstance(length, bool) or
                    not (frames - 1) * fs < length <= frames * fs):
                raise UsageError(f"length: the samples the codes were encoded from, {(frames - 1) * fs + 1}.."
                                 f"{frames * fs} for {frames} frames (as a token file records it), not {length!r}")
        return self._c.decode_codes_to_file(c, -1 if length is None else int(length), _path(out_path), nq, force,
                                            fmt, rate, meta, allow)


def _unpickle_codec(weights, config, device, threads, cache, fingerprint, n_q):
    """A pickled Codec in another process: the same files, refused if they now hold other weights."""
    c = Codec(weights, n_q=n_q, device=device, threads=threads, cache=cache, config=config)
    if c.fingerprint != fingerprint:
        raise WeightsError(f"{os.fsdecode(weights)}: holds other weights than when the codec was pickled "
                           f"(fingerprint {c.fingerprint}, pickled with {fingerprint})")
    return c


class StreamEncoder:
    """Audio in pieces of any size -> codes as frames complete (Codec.stream_encoder)."""

    def __init__(self, s, max_n_q):
        self._s = s

    def feed(self, audio):
        """audio [samples] or [channels, samples] -> int64 codes [n_q, frames completed now]."""
        a = _as_array(audio, "audio")
        if a.ndim == 1:
            a = a[None, :]
        if a.ndim != 2 or a.shape[0] == 0:
            raise UsageError(f"audio: expected [samples] or [channels, samples], not shape {a.shape}")
        return self._s.feed(np.ascontiguousarray(_audio_float32(a, "audio").T), False)

    def flush(self):
        """The codes of the last partial frame (zero-padded); the stream then starts anew. (A feed
        that raises leaves the stream as it was.)"""
        out = self._s.feed(np.zeros((0, 1), np.float32), True)
        self._s.reset()
        return out

    def reset(self):
        """Forget the stream: the next feed starts a new signal."""
        self._s.reset()


class StreamDecoder:
    """Codes in pieces -> audio (Codec.stream_decoder)."""

    def __init__(self, s):
        self._s = s

    def feed(self, codes):
        """codes [n_q, frames] -> float32 audio [1, frames * 1920]."""
        if isinstance(codes, Tokens):
            raise UsageError("a stream decodes codes as they come: feed tokens.codes (a whole token file: Codec.decode)")
        c = _codes_int64(codes, "codes")
        if c.ndim == 1:
            c = c[:, None]  # one frame
        if c.ndim != 2:
            raise UsageError(f"codes: expected [n_q, frames] or one frame [n_q], not shape {c.shape}")
        return self._s.feed(c)[None, :]

    def reset(self):
        """Forget the stream: the next feed starts new codes."""
        self._s.reset()
