"""Shared harness of the MoE peer benchmarks: routing files written by `afd bench moe --dump-routing`, random
layer weights, CUDA-graph capture per layer, and event timing of replays rotated over the layers so that L2
holds none of the weights (the same method as the C++ benchmark)."""

import argparse
import csv
import os
import statistics

import numpy as np
import torch


# As the C++ benchmark (src/kernels/cuda/bench_timing.h, kSteadyStateWarmupMs): every timed series follows this much
# warm-up, so that it runs at the clocks the software power cap settles at under sustained load.
STEADY_STATE_WARMUP_MS = 300.0


def add_timing_args(p, reps, warmup):
    """The timing flags every peer takes: timed replays per point, and the warm-up before them (time_layer)."""
    p.add_argument("--reps", type=int, default=reps)
    p.add_argument("--warmup", type=int, default=warmup)
    p.add_argument("--warmup-ms", type=float, default=STEADY_STATE_WARMUP_MS,
                   help="and at least this much device time of warm-up replays before each timed series")


def parse_args(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--routing-dir", required=True, help="folder of routing_<kind>_T<T>.bin files")
    p.add_argument("--tokens", default="1,8,64,256,1024,4096,16384")
    p.add_argument("--routing", default="uniform,zipf")
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--inter", type=int, default=768)
    p.add_argument("--experts", type=int, default=128)
    p.add_argument("--layers", type=int, default=5)
    add_timing_args(p, reps=100, warmup=10)
    p.add_argument("--csv", required=True)
    return p.parse_args()


def load_routing(folder, kind, tokens, device):
    """(ids [T, K] int32, weights [T, K] float32) on `device`."""
    path = os.path.join(folder, f"routing_{kind}_T{tokens}.bin")
    with open(path, "rb") as f:
        t, k, e = np.frombuffer(f.read(24), dtype=np.int64)
        ids = np.frombuffer(f.read(4 * t * k), dtype=np.int32).reshape(t, k)
        weights = np.frombuffer(f.read(4 * t * k), dtype=np.float32).reshape(t, k)
    assert t == tokens, f"{path}: header says T={t}"
    return torch.from_numpy(ids.copy()).to(device), torch.from_numpy(weights.copy()).to(device)


def make_layers(count, experts, hidden, inter, max_tokens, device):
    """Per layer: w13 [E, 2I, H], w2 [E, H, I] (the engine's layout), x [max_tokens, H], all bf16, random."""
    layers = []
    g = torch.Generator(device=device)
    g.manual_seed(1234)
    for _ in range(count):
        w13 = (torch.rand(experts, 2 * inter, hidden, device=device, generator=g) * 2 - 1) * (2.0 / hidden**0.5)
        w2 = (torch.rand(experts, hidden, inter, device=device, generator=g) * 2 - 1) * (2.0 / inter**0.5)
        x = torch.rand(max_tokens, hidden, device=device, generator=g) * 2 - 1
        layers.append({"w13": w13.bfloat16(), "w2": w2.bfloat16(), "x": x.bfloat16()})
        del w13, w2, x
    torch.cuda.synchronize()
    return layers


def time_layer(fn_per_layer, layers, reps, warmup, warmup_ms=STEADY_STATE_WARMUP_MS):
    """Captures fn(layer) in one CUDA graph per layer and times replays rotated over the layers after at least
    `warmup` replays and `warmup_ms` of warm-up; returns the median and the 10th/90th percentile in microseconds."""
    stream = torch.cuda.Stream()
    graphs = []
    with torch.cuda.stream(stream):
        for layer in layers:
            for _ in range(2):  # warm-up outside the graph (compilation, allocator)
                fn_per_layer(layer)
        torch.cuda.synchronize()
        for layer in layers:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=stream):
                layer["out"] = fn_per_layer(layer)
            graphs.append(g)
    torch.cuda.synchronize()
    done, elapsed_ms, batch = 0, 0.0, max(1, warmup)
    mark = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
    while done < warmup or elapsed_ms < warmup_ms:
        with torch.cuda.stream(stream):
            mark[0].record(stream)
            for i in range(batch):
                graphs[(done + i) % len(graphs)].replay()
            mark[1].record(stream)
        mark[1].synchronize()
        elapsed_ms += mark[0].elapsed_time(mark[1])
        done += batch
        per_replay_ms = max(elapsed_ms / done, 1e-4)
        batch = int(min(max((warmup_ms - elapsed_ms) / per_replay_ms + 1, 1), 65536))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    with torch.cuda.stream(stream):
        for i in range(reps):
            starts[i].record(stream)
            graphs[i % len(graphs)].replay()
            ends[i].record(stream)
    torch.cuda.synchronize()
    us = sorted(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))
    q = lambda f: us[int(f * (len(us) - 1) + 0.5)]
    del graphs
    return statistics.median(us), q(0.1), q(0.9)


def reference_out(layer, ids, weights, inter):
    """fp32 reference of the layer for a spot check of the peer's output (first 4 tokens)."""
    x = layer["x"][: ids.shape[0]].float()
    out = torch.zeros_like(x)
    for t in range(min(4, ids.shape[0])):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            h = x[t] @ layer["w13"][e].float().t()
            a = torch.nn.functional.silu(h[:inter]) * h[inter:]
            out[t] += weights[t, j] * (a @ layer["w2"][e].float().t())
    return out[: min(4, ids.shape[0])]


def write_rows(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()) if rows else ["peer"])
        w.writeheader()
        for r in rows:
            w.writerow(r)
