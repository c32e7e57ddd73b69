#!/usr/bin/env python3
"""Times one peer implementation of Mimi on the CPU, for scripts/bench-peers.sh: Kyutai's official
`moshi` package, Hugging Face transformers' MimiModel, or Kyutai's Rust `rustymimi`. Each encode
and decode call is timed after one warm-up call, on the same input as `mimi bench --input` gets in
that script (the reference speech case, tiled to the length). Prints one JSON line per (direction,
seconds): {"system", "direction", "seconds", "times": [...]}. A benchmark, not a test."""
import argparse
import json
import time

import numpy as np


def tiled_input(wav_file, seconds, rate=24000):
    import wave
    with wave.open(wav_file, "rb") as w:  # the 24 kHz mono s16 WAV bench-peers.sh writes
        assert w.getframerate() == rate and w.getnchannels() == 1 and w.getsampwidth() == 2
        x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0
    n = int(seconds * rate)
    return np.tile(x, n // x.size + 1)[:n].reshape(1, 1, n)


def timed(fn, runs):
    fn()  # warm-up
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def load_system(system, weights, threads, n_q):
    """(encode, decode, to_input, fresh) for a peer: encode/decode take and give its own tensors,
    to_input turns a float32 numpy [1, 1, T] into its input; rustymimi has no encode/decode
    closures but `fresh()`, a new Tokenizer (one keeps its streaming position across calls and
    reset() does not rewind it: every call needs a fresh one, made outside the timed call)."""
    enc = dec = fresh = None
    if system in ("moshi", "hf"):
        import torch
        torch.set_num_threads(threads)
        torch.set_num_interop_threads(1)
        torch.set_grad_enabled(False)
    if system == "moshi":
        from moshi.models import loaders
        model = loaders.get_mimi(weights, device="cpu")
        model.set_num_codebooks(n_q)
        model.eval()
        enc = lambda x: model.encode(x)
        dec = lambda c: model.decode(c)
        to_in = lambda x: torch.from_numpy(x)
    elif system == "hf":
        from transformers import MimiModel
        model = MimiModel.from_pretrained(weights, torch_dtype=torch.float32).eval()
        enc = lambda x: model.encode(x, num_quantizers=n_q).audio_codes
        dec = lambda c: model.decode(c).audio_values
        to_in = lambda x: torch.from_numpy(x)
    else:
        import os
        os.environ.setdefault("RAYON_NUM_THREADS", str(threads))
        import rustymimi
        fresh = lambda: rustymimi.Tokenizer(weights, num_codebooks=n_q)
        to_in = lambda x: x
    return enc, dec, to_in, fresh


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--system", required=True, choices=["moshi", "hf", "rustymimi"])
    ap.add_argument("--weights", required=True,
                    help="moshi/rustymimi: the moshi-dialect .safetensors; hf: a folder with model.safetensors + config.json")
    ap.add_argument("--input", required=True, help="24 kHz mono s16 WAV, tiled to each length")
    ap.add_argument("--seconds", default="10,60")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-q", type=int, default=8)
    a = ap.parse_args()

    enc, dec, to_in, fresh = load_system(a.system, a.weights, a.threads, a.n_q)

    for seconds in [float(s) for s in a.seconds.split(",")]:
        x = to_in(tiled_input(a.input, seconds))
        if a.system == "rustymimi":
            codes = fresh().encode(x)
            enc_t, dec_t = [], []
            for i in range(a.runs + 1):  # call 0 warms up
                tok = fresh()
                t0 = time.perf_counter()
                tok.encode(x)
                t1 = time.perf_counter()
                tok = fresh()
                t2 = time.perf_counter()
                tok.decode(codes)
                t3 = time.perf_counter()
                if i:
                    enc_t.append(t1 - t0)
                    dec_t.append(t3 - t2)
        else:
            codes = enc(x)
            enc_t = timed(lambda: enc(x), a.runs)
            dec_t = timed(lambda: dec(codes), a.runs)
        for d, t in (("encode", enc_t), ("decode", dec_t)):
            print(json.dumps({"system": a.system, "direction": d, "seconds": seconds, "times": t}), flush=True)


if __name__ == "__main__":
    main()
