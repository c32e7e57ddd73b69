#!/usr/bin/env python3
"""First-order H200 cost model of mimi's GPU plans (issue 27, item 4).

Input: the ops the real GPU plans launch, with their shapes, from `mimi gpu-trace -o TRACE`
(app/cli/gpu_trace.cpp: the plans run on a kernel table that records instead of computing). For each
op the model picks the kernel kernels/gpu/ would launch for that shape (the same dispatch rules)
and prices it as max(compute, memory, latency chain) plus a per-launch floor; a step is the sum
over its ops. It prints, per workload, the op count, the time per op kind, and the predicted x
real time (offline) or step time and real-time streams (streaming).

Every parameter below names its source. The model is first order: expect +-50% per kernel
(occupancy, caching and instruction mix are guessed, not read from SASS); its purpose is to say
where the time goes and to be calibrated by the first real run (scripts/gpu-check.sh prints the
measured figures beside these).

  python3 scripts/gpu_model.py TRACE [--json]
"""
import argparse
import collections
import json
import math
import sys

# ---- the machine: NVIDIA H200 SXM (GH100)
CLOCK_HZ = 1.98e9        # boost clock, H100/H200 SXM datasheet (1,980 MHz)
SMS = 132                # SMs on H100/H200 SXM (GH100 full die has 144; 132 enabled)
FMA_PER_SM_CYCLE = 128   # FP32 lanes per SM (Hopper SM: 4 x 32); 132*128*2*1.98e9 = 66.9 TFLOP/s = datasheet 67
HBM_BPS = 4.8e12         # H200 HBM3e bandwidth, datasheet
HBM_EFF = 0.85           # achievable fraction for streaming reads (typical of STREAM-like kernels on H100)
PCIE_BPS = 50e9          # PCIe Gen5 x16 achievable per direction (64 GB/s raw)
FMA_LAT = 4              # cycles, dependent FP32 FMA (Hopper/Ampere microbenchmarks: 4)
MEM_LAT = 600            # cycles, a global load that misses L2 (~300 ns measured on H100)
SMEM_LAT = 30            # cycles, shared memory load
BARRIER = 20             # cycles, __syncthreads with a few warps
LAUNCH_OP_S = 3.5e-6     # per kernel launched op by op from the host (2-5 us measured on Hopper)
LAUNCH_GRAPH_S = 1.0e-6  # per kernel node replayed from a CUDA graph (~0.5-1.5 us per small node)
COPY_LAT_S = 5e-6        # per host<->device copy (op by op); 2 us inside a graph
TILED_EFF = 0.6          # fraction of FMA peak the 64x64 SIMT tile reaches (no tensor cores; 4x4 per thread)
BLOCKS_PER_SM = 8        # resident 256-thread blocks per SM for the latency-bound kernels (2048 threads)

TILE, TILE_K, MIN_SIDE, SMALL = 64, 16, 32, 16  # kernels/gpu/gemm_tile.h: kBM/kBN, kBK, kMinSide, kSmallTile
CHUNK, SPLIT_ROWS, SPLIT_COLS = 32, 8, 8        # gemm_tile.h: kChunk, kSplitRows, kSplitCols
THREADS = 256                                   # kernels/gpu/vendor.h kThreads


def cyc(c):
    return c / CLOCK_HZ


def hbm(nbytes):
    return nbytes / (HBM_BPS * HBM_EFF)


def gemm_time(M, N, K):
    """C[M,N] = A[M,K] B[K,N] on the kernel gemm_tile.h picks. Returns (seconds, kernel name)."""
    unique = 4 * (M * K + K * N + M * N)  # A is weights (HBM every step: the model is ~8x L2)
    if M >= MIN_SIDE and N >= MIN_SIDE:
        blocks = math.ceil(M / TILE) * math.ceil(N / TILE)
        # per block and K step: 256 threads x 4x4x16 FMAs = 65,536 FMAs; an SM retires 128 a cycle
        per_step = TILE * TILE * TILE_K / FMA_PER_SM_CYCLE / TILED_EFF
        waves = math.ceil(blocks / SMS)
        return max(cyc(waves * math.ceil(K / TILE_K) * per_step), hbm(unique)), "gemm_tile"
    if N < MIN_SIDE:
        return splitk_time(M, N, K, unique), "gemm_splitk"
    # few rows: one output per thread, 16x16 blocks; each 16-k tile is a global load round trip
    # (no prefetch), a barrier, 16 dependent FMAs and a barrier: a latency chain of K/16 tiles
    blocks = math.ceil(M / SMALL) * math.ceil(N / SMALL)
    waves = math.ceil(blocks / (SMS * BLOCKS_PER_SM))
    chain = math.ceil(K / SMALL) * (MEM_LAT + SMALL * FMA_LAT + 2 * BARRIER)
    return max(cyc(waves * chain), hbm(unique)), "gemm_small"


def splitk_time(M, N, K, unique_bytes):
    """gemm_splitk_kernel: a warp per row, its lanes over the 32-k chunks, 8 columns a block.
    Per round of 32 chunks: A's 128 B per lane from memory, 32 dependent FMAs (the 8 columns are
    independent chains), two barriers, then 32 dependent adds of the chunk sums in order."""
    blocks = math.ceil(M / SPLIT_ROWS) * math.ceil(N / SPLIT_COLS)
    waves = math.ceil(blocks / (SMS * BLOCKS_PER_SM))
    rounds = max(1, math.ceil(math.ceil(K / CHUNK) / 32))
    chain = MEM_LAT + CHUNK * FMA_LAT + 2 * BARRIER + 32 * FMA_LAT
    return max(cyc(waves * rounds * chain), hbm(unique_bytes))


def conv_direct_time(op):
    """conv1d_kernel / convtr_kernel: one thread per output, summing its taps in order."""
    cout, t_out = op["cout"], op["t_out"]
    taps = op["cin"] // op["groups"] * op["k"]
    if op["op"] == "conv_transpose1d":
        taps = op["cin"] // op["groups"] * math.ceil(op["k"] / op["stride"])
    blocks = math.ceil(t_out / THREADS) * cout
    waves = math.ceil(blocks / (SMS * BLOCKS_PER_SM))
    # per tap: two loads (L1 after the first touch) feeding one dependent FMA
    chain = MEM_LAT + taps * (FMA_LAT + 2)
    w_bytes = 4 * cout * taps
    return max(cyc(waves * chain), hbm(w_bytes + 4 * (op["cin"] * op["t_in"] + cout * t_out)))


def op_time(op):
    """(seconds of device time, kernel launches, kind) for one traced op."""
    k = op["op"]
    if k in ("gemm", "linear", "linear_gelu", "linear_scale_add"):
        t, name = gemm_time(op["M"], op["N"], op["K"])
        return t, 1, name
    if k == "layer_norm_linear":  # a statistics kernel, then the GEMM reading x through the norm
        t, name = gemm_time(op["M"], op["N"], op["K"])
        return t + hbm(4 * op["K"] * op["N"]), 2, name
    if k == "conv1d":
        if op["groups"] == 1 and op["cout"] >= MIN_SIDE and op["t_out"] >= MIN_SIDE:
            t, name = gemm_time(op["cout"], op["t_out"], op["cin"] * op["k"])
            return t, 1, "conv1d_tile"
        if op["groups"] == 1 and op["t_out"] < MIN_SIDE:
            K = op["cin"] * op["k"]
            unique = 4 * (op["cout"] * K + op["cin"] * op["t_in"] + op["cout"] * op["t_out"])
            return splitk_time(op["cout"], op["t_out"], K, unique), 1, "conv1d_splitk"
        return conv_direct_time(op), 1, "conv1d_direct"
    if k == "conv1d_segments":
        # the conv over every segment's columns at once (the same kernels, by N = all columns),
        # then one small launch moving each segment's context on
        whole = dict(op, op="conv1d", t_in=op["t_in"] * op["segments"], t_out=op["t_out"] * op["segments"])
        t, n, name = op_time(whole)
        if op["context"] > 0:
            return t + max(cyc(MEM_LAT), hbm(8 * op["segments"] * op["cin"] * op["context"])), n + 1, name
        return t, n, name
    if k == "conv_transpose1d_segments":
        # the transposed conv over every segment's columns (the same kernels), then one thread per
        # (segment, channel) adding the carried overlap and summing the next one (O outputs of
        # ceil(K/S) * Cin/groups dependent FMAs each)
        whole = dict(op, op="conv_transpose1d", t_in=op["t_in"] * op["segments"], t_out=op["t_out"] * op["segments"])
        t, n, name = op_time(whole)
        O = op["k"] - op["stride"]
        if O > 0:
            chain = O * math.ceil(op["k"] / op["stride"]) * (op["cin"] // op["groups"]) * FMA_LAT
            waves = math.ceil(op["segments"] * op["cout"] / (SMS * BLOCKS_PER_SM * THREADS))
            return t + cyc(MEM_LAT + waves * chain), n + 1, name
        return t, n, name
    if k == "conv_transpose1d":
        rows, cols = op["stride"] * op["cout"], math.ceil(op["t_out"] / op["stride"])
        K = math.ceil(op["k"] / op["stride"]) * op["cin"]
        if op["groups"] == 1 and rows >= MIN_SIDE and cols >= MIN_SIDE:
            t, name = gemm_time(rows, cols, K)
            return t, 1, "convtr_tile"
        if op["groups"] == 1 and cols < MIN_SIDE:
            unique = 4 * (op["cin"] * op["cout"] * op["k"] + op["cin"] * op["t_in"] + op["cout"] * op["t_out"])
            return splitk_time(rows, cols, K, unique), 1, "convtr_splitk"
        return conv_direct_time(op), 1, "convtr_direct"
    if k == "attention":
        # one thread per query (64 a block), per visible key: a 64-FMA dependent dot product, the
        # online softmax (an exp), 64 independent FMAs into the output
        keys = min(op["Tk"], op["context"])
        per_key = op["hd"] * FMA_LAT + 40 + op["hd"]
        blocks = math.ceil(op["Tq"] / 64) * op["H"]
        waves = math.ceil(blocks / (SMS * BLOCKS_PER_SM * 4))
        kv = 4 * 2 * op["H"] * op["hd"] * op["Tk"]
        return max(cyc(waves * (MEM_LAT + keys * per_key)), hbm(kv)), 1, "attention"
    if k == "attention_window":
        # the same per-query kernel over every slot's segment at once (grid.z = segments), keys
        # read from the slot's ring; a steady window holds `context` keys
        keys = min(op["ring"], op["context"])
        per_key = op["hd"] * FMA_LAT + 40 + op["hd"]
        blocks = math.ceil(op["max_len"] / 64) * op["H"] * op["segments"]
        waves = math.ceil(blocks / (SMS * BLOCKS_PER_SM * 4))
        kv = 4 * 2 * op["H"] * op["hd"] * op["segments"] * min(op["ring"], op["context"] + op["max_len"])
        return max(cyc(waves * (MEM_LAT + keys * per_key)), hbm(kv)), 1, "attention"
    if k == "rvq_encode":
        Q, F, bins, n = op["Q"], op["F"], op["bins"], op["n"]
        # per codebook: the dot products as a GEMM (tiled, or split-K at few frames: all SMs), then
        # one block per frame: |r|^2 (Q dependent FMAs), bins/256 distances a thread, a tree of 8
        # levels, the update
        pick = MEM_LAT + Q * FMA_LAT + bins / THREADS * 12 + 8 * (BARRIER + SMEM_LAT) + MEM_LAT
        waves = math.ceil(F / (SMS * BLOCKS_PER_SM))
        t = sum(gemm_time(bins, F, Q)[0] + cyc(waves * pick) for _ in range(n))
        return t, 2 * n + 1, "rvq"
    if k == "rvq_decode":
        return max(cyc(MEM_LAT * 2), hbm(4 * op["Q"] * op["F"] * (op["n"] + 1))), 1, "rvq_decode"
    if k in ("h2d", "d2h"):
        return op["bytes"] / PCIE_BPS, 0, "copy"
    if k == "layer_norm":
        n = op["C"] * op["T"]
        return max(cyc(MEM_LAT + op["C"] * FMA_LAT), hbm(8 * n)), 1, "elementwise"
    if k == "rope":
        n = op["H"] * op["hd"] * op["T"]
        return max(cyc(MEM_LAT + 60), hbm(8 * n)), 1, "elementwise"
    if k == "rope_append":  # q rotated in place, k rotated and v copied into the rings: 3 reads, 3 writes
        n = op["H"] * op["hd"] * op["T"]
        return max(cyc(MEM_LAT + 60), hbm(24 * n)), 1, "elementwise"
    if "n" in op:  # elu, gelu, add, bias, scale_add, fill, copy2d, add2d: one pass over n floats
        return max(cyc(MEM_LAT), hbm(12 * op["n"])), 1, "elementwise"
    raise SystemExit(f"gpu_model: no cost for op {k}")


def price(workload, graphs):
    launch = LAUNCH_GRAPH_S if graphs else LAUNCH_OP_S
    copy_lat = 2e-6 if graphs else COPY_LAT_S
    total = 0.0
    by_kind = collections.defaultdict(lambda: [0, 0.0])
    launches = 0
    for op in workload["ops"]:
        t, n, kind = op_time(op)
        # a kernel shorter than the launch interval is bound by it; copies by their own latency
        t = max(t, n * launch) if n else t + copy_lat
        total += t
        launches += n
        by_kind[kind][0] += 1
        by_kind[kind][1] += t
    return total, launches, by_kind


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = []
    with open(a.trace) as f:
        for line in f:
            w = json.loads(line)
            streaming = "streaming" in w["workload"]
            graphs = streaming  # steady streaming steps replay graphs; offline chunks run op by op
            t, launches, kinds = price(w, graphs)
            audio = w["audio_s"] * w["slots"]
            r = {"workload": w["workload"], "ops": len(w["ops"]), "launches": launches, "graphs": graphs,
                 "predicted_s": t, "x_real_time": audio / t,
                 "kinds": {k: {"ops": v[0], "seconds": v[1]} for k, v in sorted(kinds.items(), key=lambda kv: -kv[1][1])}}
            if streaming:
                r["step_ms"] = 1e3 * t
                r["realtime_streams"] = w["slots"] if t <= w["audio_s"] else 0
            rows.append(r)
    if a.json:
        print(json.dumps({"model": "H200 first order (scripts/gpu_model.py)", "results": rows}, indent=1))
        return
    print("H200 cost model (first order, +-50%: scripts/gpu_model.py; measured figures come from gpu-check.sh)")
    print(f"{'workload':40} {'ops':>6} {'launch':>6} {'predicted':>11} {'x real time':>12}  where the time goes")
    for r in rows:
        top = ", ".join(f"{k} {1e3 * v['seconds']:.2f} ms ({v['ops']})" for k, v in list(r["kinds"].items())[:3])
        pred = f"{1e3 * r['predicted_s']:.2f} ms"
        extra = f"  [{'fits' if r.get('realtime_streams') else 'MISSES'} 80 ms]" if "step_ms" in r else ""
        print(f"{r['workload']:40} {r['ops']:>6} {r['launches']:>6} {pred:>11} {r['x_real_time']:>11.1f}x  {top}{extra}")


if __name__ == "__main__":
    sys.exit(main())
