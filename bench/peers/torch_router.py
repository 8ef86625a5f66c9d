"""Peer of `afd bench router`: the Qwen3-MoE router as transformers runs it (bf16 linear for the logits, softmax in
fp32, top-k, renormalisation of the k weights), graph-replayed over rotated gate weight sets so that L2 holds none of
them (the same method as the C++ benchmark). Prints and writes one CSV row per T."""

import argparse
import sys

import torch
import torch.nn.functional as F

import peer_common


def route(x, gate, top_k, renormalize):
    logits = F.linear(x, gate)
    probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return ids, weights


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--tokens", default="1,8,64,256,1024,4096,16384")
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--experts", type=int, default=128)
    p.add_argument("--top-k", type=int, default=8)
    p.add_argument("--weight-sets", type=int, default=256)
    peer_common.add_timing_args(p, reps=200, warmup=20)
    p.add_argument("--csv", required=True)
    args = p.parse_args()
    dev = torch.device("cuda")
    token_list = [int(t) for t in args.tokens.split(",")]
    g = torch.Generator(device=dev)
    g.manual_seed(4321)
    x_all = (torch.rand(max(token_list), args.hidden, device=dev, generator=g) * 2 - 1).bfloat16()
    gates = [((torch.rand(args.experts, args.hidden, device=dev, generator=g) * 2 - 1) * (2.0 / args.hidden)).bfloat16()
             for _ in range(args.weight_sets)]
    rows = []
    for tokens in token_list:
        x = x_all[:tokens]
        sets = [{"gate": w} for w in gates]
        try:
            med, p10, p90 = peer_common.time_layer(lambda s: route(x, s["gate"], args.top_k, True), sets, args.reps,
                                                   args.warmup, args.warmup_ms)
        except Exception as e:  # a peer that cannot run a point reports it and goes on
            print(f"torch_router T={tokens}: failed: {e}", file=sys.stderr)
            med = p10 = p90 = float("nan")
        print(f"torch_router T={tokens:6d} median {med:9.2f} us  (p10 {p10:.2f}, p90 {p90:.2f})", flush=True)
        rows.append({"peer": "torch_router", "tokens": tokens, "median_us": f"{med:.2f}", "p10_us": f"{p10:.2f}",
                     "p90_us": f"{p90:.2f}"})
    peer_common.write_rows(args.csv, rows)


if __name__ == "__main__":
    main()
