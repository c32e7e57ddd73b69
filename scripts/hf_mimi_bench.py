#!/usr/bin/env python3
"""Times Hugging Face transformers' MimiModel (float32) on the same weights and input length as
`mimi bench`, for scripts/gpu-check.sh. Prints one JSON object: per batch size, encode and
decode seconds per batch (min of --runs after a warm-up) and the real-time factor (audio
seconds processed per second, all inputs of the batch together)."""
import argparse
import json
import time

import torch
from transformers import MimiModel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", required=True, help="folder with model.safetensors + config.json (HF dialect)")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--batch", default="1,64")
    ap.add_argument("--n-q", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    model = MimiModel.from_pretrained(a.weights, torch_dtype=torch.float32).to(a.device).eval()
    sr = model.config.sampling_rate
    n = int(a.seconds * sr)
    out = {"device": torch.cuda.get_device_name() if a.device.startswith("cuda") else a.device,
           "torch": torch.__version__, "seconds": a.seconds, "n_q": a.n_q, "results": []}
    for b in [int(x) for x in a.batch.split(",")]:
        g = torch.Generator().manual_seed(0)
        x = (0.1 * torch.randn(b, 1, n, generator=g)).to(a.device)
        times = {"encode": [], "decode": []}
        with torch.no_grad():
            for i in range(a.runs + 1):  # run 0 warms up
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                codes = model.encode(x, num_quantizers=a.n_q).audio_codes
                torch.cuda.synchronize()
                t1 = time.perf_counter()
                model.decode(codes)
                torch.cuda.synchronize()
                t2 = time.perf_counter()
                if i > 0:
                    times["encode"].append(t1 - t0)
                    times["decode"].append(t2 - t1)
        for d in ("encode", "decode"):
            best = min(times[d])
            out["results"].append({"direction": d, "batch": b, "min_s": best, "rtf": b * a.seconds / best})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
