#!/usr/bin/env python3
"""Checks the engine against HF transformers on Qwen3-MoE checkpoints of many shapes.

For each variant: transformers builds a random Qwen3MoeForCausalLM, saves it in BF16 (save_pretrained), and
computes greedy ids and the last prompt position's logits with the BF16 weights upcast to FP32 (every step a full
forward pass over the prompt and the ids so far, whose top two logits it keeps). Then the engine runs on the saved
checkpoint: the dense reference (`afd generate`) and AFD (`afd launch`, m2n 1A2F and p2p 2A1F, which must also give
the dense reference's ids).

Pass with --device cpu (the FP32 engine): ids identical to transformers' everywhere, prompt logits within relative
L2 1e-4 of transformers'.

Pass with --device cuda (the GPU engine keeps activations in BF16): prompt logits within relative L2 2e-2, and ids
equal to transformers' up to the first step where they differ, if any (the near-tie rule of vLLM's
check_logprobs_close). At that step i the engine's token must be transformers' runner-up there, and transformers'
margin between its top-1 and that token (its logits at step i are those of prompt + the common prefix, the ids both
chose before i) must be below NEAR_TIE_REL x the RMS of those logits: the engine's logits may err by about 2e-2 x
their RMS each (the relative L2 they are held to), the difference of two logits by about sqrt(2) times that, and a
margin within three such deviations (0.085 x RMS; about 0.085 logits on these models, whose logits have an RMS near
1) is one a correct BF16 engine may flip. Likewise where transformers' router logits for that prefix (any MoE layer,
any position) have a gap below ROUTER_TIE between their k-th and (k+1)-th expert: BF16 may route that token to the
other expert, and every later logit moves with it. Then the comparison of that run stops, reported as "near-tie at
step i (margin m)" or "routing near-tie at step i (gap g)". Anything else fails.

Needs python3 with torch and transformers (the GPU machine has both; transformers runs on the CPU).
Usage: scripts/hf_crosscheck.py --afd build/src/afd [--out DIR] [--device cuda]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import torch
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

BASE = dict(vocab_size=512, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=8, num_experts_per_tok=2,
            norm_topk_prob=True, max_position_embeddings=256, rope_theta=1e6, rms_norm_eps=1e-6,
            tie_word_embeddings=False, decoder_sparse_step=1, mlp_only_layers=[], attention_bias=False)

VARIANTS = {
    "gqa8to1_headdim32": dict(num_attention_heads=8, num_key_value_heads=1, head_dim=32),
    "mha_headdim8": dict(num_attention_heads=8, num_key_value_heads=8, head_dim=8),
    "norm_topk_false_top3of6": dict(norm_topk_prob=False, num_experts=6, num_experts_per_tok=3),
    "mixed_dense_moe": dict(num_hidden_layers=5, decoder_sparse_step=2, mlp_only_layers=[0]),
    "tied_embeddings": dict(tie_word_embeddings=True),
    "real_vocab_151936": dict(vocab_size=151936),
    "theta1e4_eps1e5": dict(rope_theta=1e4, rms_norm_eps=1e-5),
    "attention_bias": dict(attention_bias=True),
    "experts64_top8": dict(num_experts=64, num_experts_per_tok=8, moe_intermediate_size=16),
}

PROMPT = [3, 17, 99, 250, 7, 42, 311, 5]
NEW_TOKENS = 12
# --device cuda: a margin below NEAR_TIE_REL x RMS(logits) is a near-tie (3 x sqrt(2) x 2e-2; see the docstring).
NEAR_TIE_REL = 3 * math.sqrt(2) * 2e-2
# --device cuda: a router top-k gap below this may route a token to another expert in BF16 (the engine's tests use the
# same bound, kDecidableRouterGap in tests/attention_cuda/engine_test_util.h: swaps were seen at gaps up to 3e-3).
ROUTER_TIE = 1e-2


def build_config(cfg):
    """Qwen3MoeConfig across transformers versions: 5.x spells num_experts as num_local_experts and keeps
    rope_theta inside rope_parameters; 4.x uses the hub names."""
    plain = {k: v for k, v in cfg.items() if k not in ("num_experts", "rope_theta")}
    config = Qwen3MoeConfig(**plain)
    for attr in ("num_experts", "num_local_experts"):
        if hasattr(config, attr):
            setattr(config, attr, cfg["num_experts"])
    if isinstance(getattr(config, "rope_parameters", None), dict):
        config.rope_parameters["rope_theta"] = cfg["rope_theta"]
    if hasattr(config, "rope_theta"):
        config.rope_theta = cfg["rope_theta"]
    return config


def check_saved(model_dir, cfg):
    with open(os.path.join(model_dir, "config.json")) as f:
        saved = json.load(f)
    experts = saved.get("num_local_experts", saved.get("num_experts"))
    theta = saved.get("rope_theta", (saved.get("rope_parameters") or {}).get("rope_theta"))
    if experts != cfg["num_experts"] or theta != cfg["rope_theta"]:
        raise RuntimeError(f"{model_dir}: saved config has experts={experts} rope_theta={theta}, wanted "
                           f"{cfg['num_experts']} and {cfg['rope_theta']}")


def make_model(overrides, seed):
    cfg = dict(BASE)
    cfg.update(overrides)
    config = build_config(cfg)
    torch.manual_seed(seed)
    model = Qwen3MoeForCausalLM(config)
    # Larger-than-default random weights so greedy choices are decided by clear margins.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[-1]))
            elif "norm" in name:
                p.uniform_(0.8, 1.2)
            else:
                p.normal_(0.0, 0.1)
    return model.to(torch.bfloat16)


def router_gap(out, config):
    """The smallest gap, over every MoE layer and every position of the prefix, between the k-th and (k+1)-th router
    logit (k = num_experts_per_tok): below ROUTER_TIE a BF16 engine may route that token to another expert. None where
    transformers returns no router logits."""
    layers = getattr(out, "router_logits", None)
    if not layers:
        return None
    k = config.num_experts_per_tok
    gaps = []
    for r in layers:
        if r is None or r.shape[-1] <= k:
            continue
        top = torch.topk(r.reshape(-1, r.shape[-1]).float(), k + 1, dim=-1).values
        gaps.append(float(torch.min(top[:, k - 1] - top[:, k])))
    return min(gaps) if gaps else None


def reference(model_dir):
    # Reload the saved BF16 checkpoint in FP32, as transformers' users run it: upcasting the in-memory BF16 model
    # would also leave the rotary inv_freq buffer rounded to BF16.
    try:
        m = Qwen3MoeForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    except TypeError:
        m = Qwen3MoeForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    m.eval()
    ids = list(PROMPT)
    steps = []  # per step: the top two ids and logits, and the logits' RMS
    last_prompt_logits = None
    with torch.no_grad():
        for step in range(NEW_TOKENS):
            # A whole forward pass over the prompt and the ids so far: step i's logits are those of that prefix.
            out = m(torch.tensor([ids]), output_router_logits=True)
            logits = out.logits[0, -1]
            if step == 0:
                last_prompt_logits = logits.tolist()
            top2 = torch.topk(logits, 2)
            steps.append({"ids": [int(i) for i in top2.indices], "logits": [float(v) for v in top2.values],
                          "rms": float(torch.sqrt(torch.mean(logits * logits))),
                          "router_gap": router_gap(out, m.config)})
            ids.append(int(torch.argmax(logits)))
    margin = min(s["logits"][0] - s["logits"][1] for s in steps)
    return ids[len(PROMPT):], last_prompt_logits, margin, steps


def compare_ids(got, want, steps, exact):
    """An engine's greedy ids against transformers': "yes" (equal), "tie@i" (unless exact: equal up to a near-tie at
    step i where the engine took transformers' runner-up, the docstring's rule) or "no", and a note saying why."""
    if got == want:
        return "yes", ""
    if exact:
        return "no", f"ids {got} differ from transformers' {want}"
    step = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), None)
    if step is None:
        return "no", f"{len(got)} ids against transformers' {len(want)}"
    top = steps[step]
    margin = top["logits"][0] - top["logits"][1]
    tolerance = NEAR_TIE_REL * top["rms"]
    if got[step] == top["ids"][1] and margin < tolerance:
        return f"tie@{step}", f"near-tie at step {step} (margin {margin:.4f}, tolerance {tolerance:.4f})"
    gap = top.get("router_gap")
    if gap is not None and gap < ROUTER_TIE:
        return f"rtie@{step}", (f"routing near-tie at step {step}: transformers' router logits of that prefix have a "
                                f"top-k gap of {gap:.4f} (< {ROUTER_TIE}); the engine took {got[step]}, transformers "
                                f"{top['ids'][0]} (margin {margin:.4f})")
    return "no", (f"differs at step {step}: the engine took {got[step]}, transformers {top['ids'][0]} "
                  f"(runner-up {top['ids'][1]}, margin {margin:.4f}, near-tie tolerance {tolerance:.4f})")


def rel_l2(a, b):
    num = sum((x - y) ** 2 for x, y in zip(a, b))
    den = sum(y * y for y in b)
    return math.sqrt(num / den)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} exited {r.returncode}: {r.stderr[-2000:]}")
    return json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--afd", required=True)
    ap.add_argument("--out", default=None)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                    help="where the engine runs: cuda puts the dense engine and both AFD roles on GPU 0")
    args = ap.parse_args()
    device = ["--device", args.device]
    exact = args.device == "cpu"
    tolerance = 1e-4 if exact else 2e-2
    out_dir = args.out or tempfile.mkdtemp(prefix="afd-hf-")
    prompt = ",".join(map(str, PROMPT))
    rows = []
    failed = False
    for i, (name, overrides) in enumerate(VARIANTS.items()):
        model_dir = os.path.join(out_dir, name)
        model = make_model(overrides, seed=1000 + i)
        model.save_pretrained(model_dir)
        check_saved(model_dir, {**BASE, **overrides})
        want_ids, want_logits, margin, steps = reference(model_dir)
        try:
            dense = run([args.afd, "generate", "--model", model_dir, "--prompt-ids", prompt, "--max-tokens",
                         str(NEW_TOKENS), "--json", "--prompt-logits"] + device)["results"][0]
        except RuntimeError as e:
            print(f"{name}: the dense engine refused or failed: {e}", flush=True)
            failed = True
            rows.append((name, margin, float("nan"), {"dense": "no"}, False))
            continue
        err = rel_l2(dense["prompt_last_logits"], want_logits)
        results = {}  # run -> compare_ids' verdict
        notes = []

        def record(label, ids, matches_dense=True):
            verdict, note = compare_ids(ids, want_ids, steps, exact)
            if verdict != "no" and not matches_dense:
                verdict, note = "no", "AFD's ids differ from the dense reference's on the same device"
            results[label] = verdict
            if note:
                notes.append(f"{label}: {note}")

        record("dense", dense["new_ids"])
        for label, afd in (("m2n_1A2F", {"num_attention_ranks": 1, "num_ffn_ranks": 2}),
                           ("p2p_2A1F", {"num_attention_ranks": 2, "num_ffn_ranks": 1,
                                         "compute_gate_on_attention": False})):
            if label.startswith("m2n") and overrides.get("num_experts", BASE["num_experts"]) < 2:
                continue
            # On one GPU every rank shares it.
            ids = [] if args.device == "cpu" else [
                "--attention-device-ids", ",".join(["0"] * afd["num_attention_ranks"]),
                "--ffn-device-ids", ",".join(["0"] * afd["num_ffn_ranks"])]
            try:
                out = run([args.afd, "launch", "--model", model_dir, "--prompt-ids", prompt, "--prompt-ids", "1,2,3",
                           "--max-tokens", str(NEW_TOKENS), "--json", "--additional-config",
                           json.dumps({"afd": afd})] + device + ids)
                record(label, out["results"][0]["new_ids"], out["afd"]["matches_dense_reference"])
            except RuntimeError as e:
                print(f"{name} {label}: {e}", flush=True)
                results[label] = "no"
        ok = all(r != "no" for r in results.values()) and err < tolerance
        failed |= not ok
        rows.append((name, margin, err, results, ok))
        print(f"{name}: ids {results} logits relL2 {err:.2e} min margin {margin:.3f} -> {'PASS' if ok else 'FAIL'}",
              flush=True)
        for note in notes:
            print(f"  {note}", flush=True)
    print("\nvariant                      min-margin  logits-relL2  dense  m2n_1A2F  p2p_2A1F  result")
    for name, margin, err, res, ok in rows:
        print(f"{name:<28} {margin:>10.3f}  {err:>12.2e}  {str(res.get('dense')):>5}  {str(res.get('m2n_1A2F')):>8}"
              f"  {str(res.get('p2p_2A1F')):>8}  {'PASS' if ok else 'FAIL'}")
    print(f"{sum(r[4] for r in rows)} passed, {sum(not r[4] for r in rows)} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
