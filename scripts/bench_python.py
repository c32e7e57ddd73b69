#!/usr/bin/env python3
"""One system's datasets.map-style loop over a folder of clips, for scripts/bench-python.sh (a
benchmark, not a test). The clips (24 kHz mono s16 WAVs) are read into memory first, untimed;
then each clip is encoded in turn, as a map over a corpus does, and each clip's codes decoded in
turn. Prints one JSON line per direction: {"system", "direction", "audio_s", "wall_s"}.

  --system mimi     the Python module (import mimi), Codec(weights, threads=T)
  --system cli      `mimi encode DIR/*.wav --json` / `mimi decode`: the engine's compute_s summed
                    (the CLI's own figure for the same work, without its process start)
  --system moshi | hf | rustymimi   the peers, as scripts/peers_bench.py loads them
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
import wave

import numpy as np


def read_clips(folder):
    clips = []
    for f in sorted(glob.glob(os.path.join(folder, "*.wav"))):
        with wave.open(f, "rb") as w:
            clips.append(np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0)
    return clips


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--system", required=True, choices=["mimi", "cli", "moshi", "hf", "rustymimi"])
    ap.add_argument("--weights", required=True)
    ap.add_argument("--clips", required=True, help="folder of 24 kHz mono s16 WAVs")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-q", type=int, default=8)
    ap.add_argument("--mimi-bin", default="build/mimi")
    a = ap.parse_args()
    clips = read_clips(a.clips)
    audio_s = sum(c.size for c in clips) / 24000.0

    def report(direction, wall):
        print(json.dumps({"system": a.system, "direction": direction, "audio_s": audio_s, "wall_s": wall}), flush=True)

    if a.system == "cli":
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
            files = sorted(glob.glob(os.path.join(a.clips, "*.wav")))
            out = subprocess.run([a.mimi_bin, "encode", *files, "-o", tmp + "/", "--weights", a.weights, "--n-q",
                                  str(a.n_q), "--threads", str(a.threads), "--json", "--quiet"], check=True,
                                 capture_output=True, text=True, env=env).stdout
            report("encode", sum(json.loads(l)["compute_s"] for l in out.splitlines() if l.strip()))
            toks = sorted(glob.glob(tmp + "/*.mimi"))
            out = subprocess.run([a.mimi_bin, "decode", *toks, "-o", tmp + "/", "--weights", a.weights, "--threads",
                                  str(a.threads), "--json", "--quiet"], check=True, capture_output=True, text=True,
                                 env=env).stdout
            report("decode", sum(json.loads(l)["compute_s"] for l in out.splitlines() if l.strip()))
        return

    if a.system == "mimi":
        import mimi
        codec = mimi.Codec(a.weights, n_q=a.n_q, threads=a.threads)
        codec.decode(codec.encode(clips[0][:24000]))  # warm-up
        t0 = time.perf_counter()
        codes = [codec.encode(c) for c in clips]
        report("encode", time.perf_counter() - t0)
        t0 = time.perf_counter()
        for c, x in zip(codes, clips):
            codec.decode(c, length=x.size)
        report("decode", time.perf_counter() - t0)
        return

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from peers_bench import load_system
    enc, dec, to_in, fresh = load_system(a.system, a.weights, a.threads, a.n_q)
    inputs = [to_in(c.reshape(1, 1, -1)) for c in clips]
    if a.system == "rustymimi":  # a fresh tokenizer per call, made outside the timed call
        codes, wall = [], 0.0
        for x in inputs:
            tok = fresh()
            t0 = time.perf_counter()
            codes.append(tok.encode(x))
            wall += time.perf_counter() - t0
        report("encode", wall)
        wall = 0.0
        for c in codes:
            tok = fresh()
            t0 = time.perf_counter()
            tok.decode(c)
            wall += time.perf_counter() - t0
        report("decode", wall)
        return
    enc(inputs[0][..., :24000])  # warm-up
    t0 = time.perf_counter()
    codes = [enc(x) for x in inputs]
    report("encode", time.perf_counter() - t0)
    t0 = time.perf_counter()
    for c in codes:
        dec(c)
    report("decode", time.perf_counter() - t0)


if __name__ == "__main__":
    main()
