"""Peer: the MoE layer with torch._grouped_mm (entries sorted by expert, one grouped GEMM per projection,
SwiGLU in between, routed weights applied before an index_add back to token order), graph-replayed.
Prints and writes one CSV row per (T, routing)."""

import sys

import torch
import torch.nn.functional as F

import peer_common


def moe_grouped_mm(x, ids, weights, w13, w2, experts, inter):
    tokens, top_k = ids.shape
    flat = ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    token_of = order // top_k
    counts = torch.zeros(experts, dtype=torch.int32, device=x.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat, dtype=torch.int32))
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    xs = x[token_of]
    h = torch._grouped_mm(xs, w13.transpose(-2, -1), offs=offs)  # [T*K, 2I]
    a = F.silu(h[:, :inter]) * h[:, inter:]
    y = torch._grouped_mm(a, w2.transpose(-2, -1), offs=offs)  # [T*K, H]
    y = y * weights.reshape(-1)[order].unsqueeze(1).to(y.dtype)
    out = torch.zeros(tokens, x.shape[1], dtype=x.dtype, device=x.device)
    out.index_add_(0, token_of, y)
    return out


def main():
    args = peer_common.parse_args(__doc__)
    dev = torch.device("cuda")
    token_list = [int(t) for t in args.tokens.split(",")]
    layers = peer_common.make_layers(args.layers, args.experts, args.hidden, args.inter, max(token_list), dev)
    rows = []
    for tokens in token_list:
        for kind in args.routing.split(","):
            ids, weights = peer_common.load_routing(args.routing_dir, kind, tokens, dev)
            fn = lambda layer: moe_grouped_mm(layer["x"][:tokens], ids, weights, layer["w13"], layer["w2"],
                                              args.experts, args.inter)
            try:
                check = fn(layers[0]).float()[: min(4, tokens)]
                ref = peer_common.reference_out(layers[0], ids, weights, args.inter)
                err = float((check - ref).norm() / ref.norm())
                med, p10, p90 = peer_common.time_layer(fn, layers, args.reps, args.warmup, args.warmup_ms)
            except Exception as e:  # a peer that cannot run a point reports it and goes on
                print(f"grouped_mm T={tokens} {kind}: failed: {e}", file=sys.stderr)
                med = p10 = p90 = float("nan")
                err = float("nan")
            print(f"grouped_mm T={tokens:6d} {kind:8s} median {med:9.1f} us  (p10 {p10:.1f}, p90 {p90:.1f})"
                  f"  rel err {err:.1e}", flush=True)
            rows.append({"peer": "grouped_mm", "tokens": tokens, "routing": kind, "median_us": f"{med:.2f}",
                         "p10_us": f"{p10:.2f}", "p90_us": f"{p90:.2f}", "rel_err": f"{err:.2e}", "config": ""})
    peer_common.write_rows(args.csv, rows)


if __name__ == "__main__":
    main()
