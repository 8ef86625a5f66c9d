"""Peer: a Triton fused-MoE layer of the kind vLLM runs by default on Hopper: routing entries sorted by expert
and padded per expert to the block size (sorted token ids + one expert id per block), one Triton GEMM kernel
per projection gathering its rows through the sorted ids, SwiGLU between them, the routed weights applied in
the second GEMM, and a sum over the k entries of each token. Graph-replayed. For each point a few block
configurations are tried and the fastest is reported (a small stand-in for a tuned table)."""

import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import peer_common


@triton.jit
def fused_moe_kernel(a_ptr, b_ptr, c_ptr, topk_weights_ptr, sorted_ids_ptr, expert_ids_ptr, padded_total_ptr,
                     N, K, EM, num_valid, stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_cm,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                     MUL_ROUTED_WEIGHT: tl.constexpr, TOP_K: tl.constexpr):
    # C[entry, n] = A[row(entry), :] . B[expert, n, :]  for the entries of one padded block of one expert
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(EM, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * num_pid_n
    group = pid // in_group
    first_m = group * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % in_group) % group_m)
    pid_n = (pid % in_group) // group_m
    if pid_m * BLOCK_M >= tl.load(padded_total_ptr):
        return
    entries = tl.load(sorted_ids_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    valid = entries < num_valid
    expert = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (entries[:, None] // TOP_K).to(tl.int64) * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + expert * stride_be + offs_n[None, :].to(tl.int64) * stride_bn + offs_k[:, None] * stride_bk
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=valid[:, None] & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if MUL_ROUTED_WEIGHT:
        w = tl.load(topk_weights_ptr + entries, mask=valid, other=0.0)
        acc = acc * w[:, None]
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + entries[:, None].to(tl.int64) * stride_cm + offs_cn[None, :]
    tl.store(c_ptrs, acc.to(tl.bfloat16), mask=valid[:, None] & (offs_cn[None, :] < N))


def align_block_size(ids, block_m, experts):
    """Sorted entry ids padded per expert to block_m (pad value = number of entries), the expert of each block,
    and the padded total; static sizes, no host synchronisation (graph-capturable)."""
    flat = ids.reshape(-1).long()
    n = flat.numel()
    counts = torch.zeros(experts, dtype=torch.long, device=ids.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    pad_end = torch.cumsum(padded, 0)
    pad_start = pad_end - padded
    cnt_start = torch.cumsum(counts, 0) - counts
    order = torch.argsort(flat, stable=True)
    sorted_experts = flat[order]
    dest = pad_start[sorted_experts] + (torch.arange(n, device=ids.device) - cnt_start[sorted_experts])
    blocks = triton.cdiv(n + experts * (block_m - 1), block_m)
    sorted_ids = torch.full((blocks * block_m,), n, dtype=torch.int32, device=ids.device)
    sorted_ids[dest] = order.int()
    starts = torch.arange(blocks, device=ids.device) * block_m
    expert_ids = torch.searchsorted(pad_end, starts, right=True).clamp_(max=experts - 1).int()
    return sorted_ids, expert_ids, pad_end[-1:].int(), blocks * block_m


def grouped_gemm(a, b, c, weights, sorted_ids, expert_ids, padded_total, em, top_k, mul_weight, cfg):
    n, k = b.shape[1], b.shape[2]
    grid = (triton.cdiv(em, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]),)
    num_valid = c.shape[0]  # rows of c = routing entries; padding ids are >= this
    fused_moe_kernel[grid](a, b, c, weights, sorted_ids, expert_ids, padded_total, n, k, em, num_valid,
                           a.stride(0), a.stride(1), b.stride(0), b.stride(1), b.stride(2), c.stride(0),
                           BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"],
                           GROUP_M=cfg["GROUP_M"], MUL_ROUTED_WEIGHT=mul_weight, TOP_K=top_k,
                           num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])


def moe_triton(x, ids, weights, w13, w2, experts, inter, cfg):
    tokens, top_k = ids.shape
    entries = tokens * top_k
    sorted_ids, expert_ids, padded_total, em = align_block_size(ids, cfg["BLOCK_M"], experts)
    h = torch.empty(entries, 2 * inter, dtype=x.dtype, device=x.device)
    grouped_gemm(x, w13, h, weights, sorted_ids, expert_ids, padded_total, em, top_k, False, cfg)
    a = F.silu(h[:, :inter]) * h[:, inter:]
    y = torch.empty(entries, w2.shape[1], dtype=x.dtype, device=x.device)
    grouped_gemm(a, w2, y, weights.reshape(-1), sorted_ids, expert_ids, padded_total, em, 1, True, cfg)
    return y.view(tokens, top_k, -1).sum(dim=1)


CONFIGS = {
    "m16n64k128": dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, num_warps=4, num_stages=4),
    "m64n64k64": dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=4),
    "m64n128k64": dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=4),
    "m128n128k64": dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3),
}


def candidates(tokens):
    if tokens <= 64:
        return ["m16n64k128", "m64n64k64"]
    if tokens <= 1024:
        return ["m64n64k64", "m64n128k64"]
    return ["m64n128k64", "m128n128k64"]


def main():
    args = peer_common.parse_args(__doc__)
    dev = torch.device("cuda")
    token_list = [int(t) for t in args.tokens.split(",")]
    layers = peer_common.make_layers(args.layers, args.experts, args.hidden, args.inter, max(token_list), dev)
    rows = []
    for tokens in token_list:
        for kind in args.routing.split(","):
            ids, weights = peer_common.load_routing(args.routing_dir, kind, tokens, dev)
            best = (float("nan"), float("nan"), float("nan"), "", float("nan"))
            for name in candidates(tokens):
                cfg = CONFIGS[name]
                fn = lambda layer: moe_triton(layer["x"][:tokens], ids, weights, layer["w13"], layer["w2"],
                                              args.experts, args.inter, cfg)
                try:
                    check = fn(layers[0]).float()[: min(4, tokens)]
                    ref = peer_common.reference_out(layers[0], ids, weights, args.inter)
                    err = float((check - ref).norm() / ref.norm())
                    med, p10, p90 = peer_common.time_layer(fn, layers, args.reps, args.warmup, args.warmup_ms)
                except Exception as e:  # a configuration that cannot run is reported and skipped
                    print(f"triton T={tokens} {kind} {name}: failed: {e}", file=sys.stderr)
                    continue
                print(f"  triton T={tokens} {kind} {name}: {med:.1f} us (rel err {err:.1e})", flush=True)
                if not (best[0] <= med):
                    best = (med, p10, p90, name, err)
            med, p10, p90, name, err = best
            print(f"triton     T={tokens:6d} {kind:8s} median {med:9.1f} us  ({name})", flush=True)
            rows.append({"peer": "triton", "tokens": tokens, "routing": kind, "median_us": f"{med:.2f}",
                         "p10_us": f"{p10:.2f}", "p90_us": f"{p90:.2f}", "rel_err": f"{err:.2e}", "config": name})
    peer_common.write_rows(args.csv, rows)


if __name__ == "__main__":
    main()
