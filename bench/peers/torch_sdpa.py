"""Peer of attention_bench (bench/attention/): PyTorch SDPA on the same shapes with contiguous KV. Decode: one query
row per sequence against K/V of [batch, kv_heads, context, head_dim]; prefill: one causal sequence. The cuDNN backend
is forced (torch.nn.attention.sdpa_kernel(SDPBackend.CUDNN_ATTENTION)); where it refuses a shape the flash backend,
then the efficient one, is used, and the row says which. GQA through enable_gqa, or K/V with their heads repeated
beforehand where a backend refuses it (the row says "repeat"; the rate still counts the unrepeated bytes). Each point
is a CUDA graph of R calls on rotated inputs (together more than L2 holds), replayed after warm-up; the median replay
time over R is the call time (eager calls between events where the capture fails; the row says so). Prints the table
of attention_bench, writes the same CSV columns, and with --ours (attention_bench's CSV) prints both side by side."""

import argparse
import csv
import math
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
            ("efficient", SDPBackend.EFFICIENT_ATTENTION)]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--mode", default="all", choices=["all", "decode", "prefill"])
    p.add_argument("--batches", default="1,8,32,64,128,256")
    p.add_argument("--contexts", default="1024,4096,8192,16384,32768")
    p.add_argument("--tokens", default="1024,2048,4096,8192,16384")
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--rotate-mb", type=float, default=512)
    p.add_argument("--csv", default="")
    p.add_argument("--ours", default="", help="attention_bench's CSV: print both side by side")
    return p.parse_args()


def ints(text):
    return [int(t) for t in text.split(",") if t]


def time_calls(calls, reps, warmup):
    """Median microseconds of one call: the calls captured into one CUDA graph and replayed (eager calls between
    events if the capture fails). Returns (us, 'graph' | 'eager')."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for c in calls:
            c()  # warm-up outside the graph (plan building, allocator)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    how = "graph"
    try:
        with torch.cuda.graph(graph, stream=stream):
            for c in calls:
                c()
        run = graph.replay
    except Exception as e:  # a backend that cannot be captured is timed eagerly
        print(f"torch_sdpa: capture failed ({e}); timing eager calls", file=sys.stderr)
        torch.cuda.synchronize()
        how = "eager"

        def run():
            for c in calls:
                c()
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            run()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            starts[i].record(stream)
            run()
            ends[i].record(stream)
    torch.cuda.synchronize()
    us = [s.elapsed_time(e) * 1e3 / len(calls) for s, e in zip(starts, ends)]
    return statistics.median(us), how


def candidates():
    """(name, backend, gqa mode) in the order tried: cuDNN with enable_gqa, cuDNN with repeated KV heads, then flash,
    then efficient."""
    return [(name, backend, gqa) for name, backend in BACKENDS for gqa in ("enable_gqa", "repeat")]


def time_point(a, decode, batch, context, name, backend, gqa):
    """One call's median microseconds with this backend on R rotated input sets, as a CSV row."""
    dev = torch.device("cuda")
    rows = 1 if decode else context
    group = a.heads // a.kv_heads
    kv_bytes = 2.0 * 2.0 * batch * context * a.kv_heads * a.head_dim
    q_bytes = 2.0 * 2.0 * batch * rows * a.heads * a.head_dim
    rotations = max(1, min(128 if decode else 16, math.ceil(a.rotate_mb * 1e6 / (kv_bytes + q_bytes))))
    g = torch.Generator(device=dev)
    g.manual_seed(batch * 100003 + context)

    def rand(*shape, scale=1.0):
        return torch.rand(*shape, device=dev, generator=g, dtype=torch.bfloat16).mul_(2).sub_(1).mul_(scale)

    def kv():
        t = rand(batch, a.kv_heads, context, a.head_dim)
        return t.repeat_interleave(group, dim=1) if gqa == "repeat" else t

    causal = not decode

    def call_for(q, k, v):
        if gqa == "enable_gqa":
            return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    sets = []
    try:
        sets = [(rand(batch, a.heads, rows, a.head_dim, scale=2.0), kv(), kv()) for _ in range(rotations)]
        with sdpa_kernel(backend):
            us, how = time_calls([call_for(*s) for s in sets], a.reps, a.warmup)
    finally:
        del sets
        torch.cuda.empty_cache()
    tflops = 0.0 if decode else 2.0 * context * context * a.head_dim * a.heads / (us * 1e-6) / 1e12
    return {"impl": "torch_sdpa", "kind": "decode" if decode else "prefill", "block_size": 0, "batch": batch,
            "context": context, "rotations": rotations, "median_us": us, "gbps": kv_bytes / (us * 1e-6) / 1e9,
            "tflops": tflops, "device": torch.cuda.get_device_name(), "backend": f"{name}/{gqa}/{how}"}


def run_point(a, decode, batch, context):
    """The first candidate that runs the point; a refusal or an out-of-memory moves on to the next."""
    errors = []
    for name, backend, gqa in candidates():
        try:
            return time_point(a, decode, batch, context, name, backend, gqa)
        except Exception as e:  # this backend refuses the shape (or runs out of memory): try the next
            first_line = str(e).splitlines()[0] if str(e) else type(e).__name__
            errors.append(f"{name}/{gqa}: {first_line}")
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    raise RuntimeError("no SDPA backend ran it: " + "; ".join(errors))


def side_by_side(ours_path, peer_rows):
    """Per point: our best block size against the peer (ratio > 1: ours faster)."""
    with open(ours_path) as f:
        ours = list(csv.DictReader(f))
    peer = {(r["kind"], r["batch"], r["context"]): r for r in peer_rows}
    print(f"\n{'kind':<8} {'batch':>6} {'context':>8} {'ours_us':>10} {'bs':>4} {'sdpa_us':>10} "
          f"{'ours_GB/s':>10} {'sdpa_GB/s':>10} {'ours_TF':>8} {'sdpa_TF':>8} {'ratio':>6}  backend")
    best = {}
    for r in ours:
        key = (r["kind"], int(r["batch"]), int(r["context"]))
        if key not in best or float(r["median_us"]) < float(best[key]["median_us"]):
            best[key] = r
    for key in sorted(best, key=lambda k: (k[0], k[1], k[2])):
        r = best[key]
        p = peer.get(key)
        ours_us = float(r["median_us"])
        sdpa_us = p["median_us"] if p else float("nan")
        print(f"{key[0]:<8} {key[1]:>6} {key[2]:>8} {ours_us:>10.2f} {r['block_size']:>4} {sdpa_us:>10.2f} "
              f"{float(r['gbps']):>10.1f} {p['gbps'] if p else float('nan'):>10.1f} {float(r['tflops']):>8.1f} "
              f"{p['tflops'] if p else float('nan'):>8.1f} {sdpa_us / ours_us:>6.2f}  {p['backend'] if p else '-'}")


def main():
    a = parse_args()
    print(f"torch SDPA {torch.__version__} on {torch.cuda.get_device_name()}: {a.heads} q / {a.kv_heads} kv heads, "
          f"head_dim {a.head_dim}; contiguous KV; graph of R rotated calls")
    print(f"{'kind':<8} {'bs':>5} {'batch':>6} {'context':>8} {'R':>4} {'us':>11} {'GB/s':>9} {'TFLOP/s':>9}  backend")
    points = []
    if a.mode in ("all", "decode"):
        points += [(True, b, c) for b in ints(a.batches) for c in ints(a.contexts)]
    if a.mode in ("all", "prefill"):
        points += [(False, 1, t) for t in ints(a.tokens)]
    rows = []
    for decode, batch, context in points:
        try:
            r = run_point(a, decode, batch, context)
        except Exception as e:  # a point the peer cannot run is reported and skipped
            print(f"torch_sdpa {'decode' if decode else 'prefill'} batch {batch} context {context}: failed: {e}",
                  file=sys.stderr)
            torch.cuda.empty_cache()
            continue
        print(f"{r['kind']:<8} {'-':>5} {batch:>6} {context:>8} {r['rotations']:>4} {r['median_us']:>11.2f} "
              f"{r['gbps']:>9.1f} {r['tflops']:>9.1f}  {r['backend']}", flush=True)
        rows.append(r)
    if a.csv and rows:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            for r in rows:
                w.writerow(r)
    if a.ours:
        side_by_side(a.ours, rows)


if __name__ == "__main__":
    main()
