"""The Qwen3-MoE model of bench/peers/torch_qwen3_moe.py in PyTorch on one GPU: random BF16 weights (the synthetic
generator's ranges: linear weights +- sqrt(3 / fan_in), norms 1 +- 0.2, the embedding +- 1), and
  embedding -> per layer [RMSNorm, fused QKV, q/k RMSNorm, RoPE, attention through torch SDPA over a static
  contiguous KV cache, o_proj, residual, RMSNorm, router softmax / top-k (renormalised when norm_topk_prob), the routed
  experts through the Triton fused-MoE peer (triton_fused_moe.py), residual] -> final norm -> LM head -> greedy.
The residual stream is BF16 as transformers keeps it; norms, the router softmax and the logits are computed in FP32.
A decode step reads the first `context + 1` positions of a cache [batch, kv_heads, context + 1, head_dim] per layer and
writes the new token's K/V at position `context` (every sequence of a batch has the same length), so one CUDA graph of
the step replays at a fixed context. Dense MLP layers (mlp_only_layers, decoder_sparse_step) run a SwiGLU MLP."""

import json
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import triton_fused_moe

# Tried in this order for each kind of attention call; the first that runs (and can be captured, for decode) is used.
SDPA_BACKENDS = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
                 ("efficient", SDPBackend.EFFICIENT_ATTENTION), ("math", SDPBackend.MATH)]


class Config:
    """The fields of a config.json (hub or transformers 5 spelling) the model uses."""

    def __init__(self, path, layers=0):
        with open(path) as f:
            c = json.load(f)
        self.vocab = c["vocab_size"]
        self.hidden = c["hidden_size"]
        self.heads = c["num_attention_heads"]
        self.kv_heads = c["num_key_value_heads"]
        self.head_dim = c.get("head_dim") or self.hidden // self.heads
        self.experts = c.get("num_experts", c.get("num_local_experts", 0))
        self.top_k = c["num_experts_per_tok"]
        self.moe_inter = c["moe_intermediate_size"]
        self.inter = c["intermediate_size"]
        self.layers = layers or c["num_hidden_layers"]
        self.eps = c.get("rms_norm_eps", 1e-6)
        rope = c.get("rope_parameters") or {}
        self.rope_theta = rope.get("rope_theta", c.get("rope_theta", 10000.0))
        self.norm_topk_prob = c.get("norm_topk_prob", False)
        self.mlp_only = set(c.get("mlp_only_layers", []))
        self.sparse_step = c.get("decoder_sparse_step", 1)
        self.tied = c.get("tie_word_embeddings", False)

    def is_moe(self, layer):
        return layer not in self.mlp_only and self.experts > 0 and (layer + 1) % self.sparse_step == 0

    def describe(self):
        return (f"{self.layers} layers, hidden {self.hidden}, {self.experts} experts top-{self.top_k} of "
                f"{self.moe_inter}, {self.heads} q / {self.kv_heads} kv heads of {self.head_dim}, vocab {self.vocab}")


def rms_norm(x, weight, eps):
    """weight * x / rms(x) over the last dim, computed in FP32, returned in x's dtype."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def rope(x, cos, sin):
    """x [..., head_dim] rotated by halves (transformers' rotate_half); cos / sin broadcast to [..., head_dim / 2]."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


class Model:
    def __init__(self, cfg, seed, device, max_positions):
        self.cfg = cfg
        self.dev = device
        self.gen = torch.Generator(device=device)
        self.gen.manual_seed(seed)
        c = cfg
        qkv_rows = (c.heads + 2 * c.kv_heads) * c.head_dim
        self.embed = self._uniform((c.vocab, c.hidden), 1.0)
        self.final_norm = self._norm(c.hidden)
        self.lm_head = self.embed if c.tied else self._linear(c.vocab, c.hidden)
        self.layers = []
        for layer in range(c.layers):
            w = {"in_norm": self._norm(c.hidden), "post_norm": self._norm(c.hidden), "q_norm": self._norm(c.head_dim),
                 "k_norm": self._norm(c.head_dim), "wqkv": self._linear(qkv_rows, c.hidden),
                 "wo": self._linear(c.hidden, c.heads * c.head_dim), "moe": c.is_moe(layer)}
            if w["moe"]:
                w["gate"] = self._linear(c.experts, c.hidden)
                w["w13"] = self._uniform((c.experts, 2 * c.moe_inter, c.hidden), math.sqrt(3.0 / c.hidden))
                w["w2"] = self._uniform((c.experts, c.hidden, c.moe_inter), math.sqrt(3.0 / c.moe_inter))
            else:
                w["w13"] = self._linear(2 * c.inter, c.hidden)
                w["w2"] = self._linear(c.hidden, c.inter)
            self.layers.append(w)
        inv_freq = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2, device=device).float() / c.head_dim))
        angles = torch.arange(max_positions, device=device).float()[:, None] * inv_freq[None, :]
        self.cos, self.sin = angles.cos(), angles.sin()
        self.moe_cfg = {}  # tokens -> the Triton block config chosen for them
        self.decode_backend = None  # (name, backend) of decode attention, chosen by choose_decode_backend
        self.prefill_backend = None
        self.record_ids = None  # a list: the router's ids of every MoE layer are appended while it is not None
        torch.cuda.synchronize()

    def _uniform(self, shape, half_width, centre=0.0):
        t = torch.empty(shape, dtype=torch.bfloat16, device=self.dev)
        return t.uniform_(centre - half_width, centre + half_width, generator=self.gen)

    def _linear(self, out_features, in_features):
        return self._uniform((out_features, in_features), math.sqrt(3.0 / in_features))

    def _norm(self, n):
        return self._uniform((n,), 0.2, 1.0)

    def weight_bytes(self):
        tensors = [self.embed, self.final_norm] + ([] if self.cfg.tied else [self.lm_head])
        for w in self.layers:
            tensors += [v for v in w.values() if isinstance(v, torch.Tensor)]
        return sum(t.numel() * t.element_size() for t in tensors)

    # --- The blocks -------------------------------------------------------------------------------------------------
    def _qkv(self, w, x, cos, sin):
        """q [T, heads, hd], k and v [T, kv_heads, hd] after the q/k norms and RoPE."""
        c = self.cfg
        qkv = F.linear(x, w["wqkv"])
        q, k, v = qkv.split([c.heads * c.head_dim, c.kv_heads * c.head_dim, c.kv_heads * c.head_dim], dim=-1)
        t = x.shape[0]
        q = rope(rms_norm(q.view(t, c.heads, c.head_dim), w["q_norm"], c.eps), cos, sin)
        k = rope(rms_norm(k.view(t, c.kv_heads, c.head_dim), w["k_norm"], c.eps), cos, sin)
        return q, k, v.view(t, c.kv_heads, c.head_dim)

    def _mlp(self, w, x):
        c = self.cfg
        if not w["moe"]:
            h = F.linear(x, w["w13"])
            return F.linear(F.silu(h[:, :c.inter]) * h[:, c.inter:], w["w2"])
        probs = torch.softmax(F.linear(x, w["gate"]).float(), dim=-1)
        weights, ids = torch.topk(probs, c.top_k, dim=-1)
        if c.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        ids = ids.int()
        if self.record_ids is not None:
            self.record_ids.append(ids)
        cfg = self.moe_cfg[x.shape[0]]
        return triton_fused_moe.moe_triton(x, ids, weights, w["w13"], w["w2"], c.experts, c.moe_inter, cfg)

    def _decode_attention(self, q, k_cache, v_cache, backend):
        """q [B, heads, hd] against every position of k/v_cache [B, kv_heads, L, hd]: the query heads of one KV head
        become that head's query rows (no mask: every position is before the new token or is it)."""
        c = self.cfg
        b = q.shape[0]
        group = c.heads // c.kv_heads
        qg = q.view(b, c.kv_heads, group, c.head_dim)
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(qg, k_cache, v_cache, scale=1.0 / math.sqrt(c.head_dim))
        return out.reshape(b, c.heads * c.head_dim)

    def _prefill_attention(self, q, k, v, backend, gqa):
        """Causal attention of one sequence: q [T, heads, hd], k / v [T, kv_heads, hd]."""
        c = self.cfg
        qt, kt, vt = q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None]
        if gqa == "repeat":
            group = c.heads // c.kv_heads
            kt, vt = kt.repeat_interleave(group, dim=1), vt.repeat_interleave(group, dim=1)
        with sdpa_kernel(backend):
            if gqa == "enable_gqa":
                out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=True)
            else:
                out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
        return out[0].transpose(0, 1).reshape(q.shape[0], c.heads * c.head_dim)

    # --- Steps ------------------------------------------------------------------------------------------------------
    def decode_step(self, tokens, k_caches, v_caches, context):
        """One greedy decode step of B sequences whose caches hold `context` positions: tokens [B] int64 (replaced by
        the next ones, in place), k/v_caches per layer [B, kv_heads, context + 1, hd]."""
        c = self.cfg
        cos, sin = self.cos[context], self.sin[context]
        h = F.embedding(tokens, self.embed)
        for w, kc, vc in zip(self.layers, k_caches, v_caches):
            q, k, v = self._qkv(w, rms_norm(h, w["in_norm"], c.eps), cos, sin)
            kc[:, :, context] = k
            vc[:, :, context] = v
            h = h + F.linear(self._decode_attention(q, kc, vc, self.decode_backend[1]), w["wo"])
            h = h + self._mlp(w, rms_norm(h, w["post_norm"], c.eps))
        logits = F.linear(rms_norm(h, self.final_norm, c.eps), self.lm_head).float()
        tokens.copy_(logits.argmax(dim=-1))
        return logits

    def prefill(self, tokens):
        """The prefill of one sequence (tokens [T] int64): every layer's K/V computed (not kept), the first token
        sampled greedily from the last row. Returns it [1]."""
        c = self.cfg
        t = tokens.shape[0]
        cos, sin = self.cos[:t, None, :], self.sin[:t, None, :]
        name, backend, gqa = self.prefill_backend
        h = F.embedding(tokens, self.embed)
        for w in self.layers:
            q, k, v = self._qkv(w, rms_norm(h, w["in_norm"], c.eps), cos, sin)
            h = h + F.linear(self._prefill_attention(q, k, v, backend, gqa), w["wo"])
            h = h + self._mlp(w, rms_norm(h, w["post_norm"], c.eps))
        logits = F.linear(rms_norm(h[-1:], self.final_norm, c.eps), self.lm_head).float()
        return logits.argmax(dim=-1)

    # --- Choices made once per shape -------------------------------------------------------------------------------
    def choose_moe_config(self, tokens, reps=10):
        """The fastest of triton_fused_moe's candidate block configs for `tokens` rows on layer 0's shapes (random
        routing), kept for every layer."""
        if tokens in self.moe_cfg or self.cfg.experts == 0:
            self.moe_cfg.setdefault(tokens, None)
            return
        c = self.cfg
        w = next(l for l in self.layers if l["moe"])
        x = self._uniform((tokens, c.hidden), 1.0)
        ids = torch.rand(tokens, c.experts, device=self.dev, generator=self.gen).argsort(dim=-1)[:, :c.top_k]
        ids = ids.int().contiguous()
        weights = torch.full((tokens, c.top_k), 1.0 / c.top_k, device=self.dev)
        best = None
        for name in triton_fused_moe.candidates(tokens):
            cfg = triton_fused_moe.CONFIGS[name]
            run = lambda: triton_fused_moe.moe_triton(x, ids, weights, w["w13"], w["w2"], c.experts, c.moe_inter, cfg)
            try:
                for _ in range(3):
                    run()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(reps):
                    run()
                end.record()
                end.synchronize()
                ms = start.elapsed_time(end) / reps
            except Exception:  # a block config Triton cannot build for this shape is skipped
                continue
            if best is None or ms < best[0]:
                best = (ms, cfg)
        if best is None:
            raise RuntimeError(f"no Triton fused-MoE config runs {tokens} tokens")
        self.moe_cfg[tokens] = best[1]

    def choose_decode_backend(self, batch, context):
        """The first SDPA backend that runs the decode attention of (batch, context) and can be captured in a graph."""
        c = self.cfg
        group = c.heads // c.kv_heads
        q = self._uniform((batch, c.heads, c.head_dim), 1.0)
        kv = self._uniform((batch, c.kv_heads, context + 1, c.head_dim), 1.0)
        errors = []
        for name, backend in SDPA_BACKENDS:
            try:
                stream = torch.cuda.Stream()
                with torch.cuda.stream(stream):
                    self._decode_attention(q, kv, kv, backend)
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, stream=stream):
                    self._decode_attention(q, kv, kv, backend)
                graph.replay()
                torch.cuda.synchronize()
                self.decode_backend = (name, backend)
                return name
            except Exception as e:  # this backend refuses the shape or the capture: try the next
                errors.append(f"{name}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
                torch.cuda.synchronize()
        raise RuntimeError(f"no SDPA backend runs decode attention (group {group}): " + "; ".join(errors))

    def choose_prefill_backend(self, tokens):
        """The first (SDPA backend, GQA form) that runs the causal prefill attention of `tokens` tokens."""
        c = self.cfg
        q = self._uniform((tokens, c.heads, c.head_dim), 1.0)
        kv = self._uniform((tokens, c.kv_heads, c.head_dim), 1.0)
        errors = []
        for name, backend in SDPA_BACKENDS:
            for gqa in ("enable_gqa", "repeat"):
                try:
                    self._prefill_attention(q, kv, kv, backend, gqa)
                    torch.cuda.synchronize()
                    self.prefill_backend = (f"{name}/{gqa}", backend, gqa)
                    return self.prefill_backend[0]
                except Exception as e:  # refused: try the next
                    errors.append(f"{name}/{gqa}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
                    torch.cuda.synchronize()
        raise RuntimeError("no SDPA backend runs prefill attention: " + "; ".join(errors))

    # --- Checks of the peer's own pieces against plain PyTorch -------------------------------------------------------
    def self_check(self, tokens=4, context=64):
        """Relative errors of the Triton MoE (layer 0, `tokens` rows) and of the decode attention against FP32
        references written plainly, as a dict."""
        c = self.cfg
        out = {}
        w = next((l for l in self.layers if l["moe"]), None)
        if w is not None:
            self.choose_moe_config(tokens)
            x = self._uniform((tokens, c.hidden), 1.0)
            probs = torch.softmax(F.linear(x, w["gate"]).float(), dim=-1)
            weights, ids = torch.topk(probs, c.top_k, dim=-1)
            got = self._mlp(w, x).float()
            if c.norm_topk_prob:
                weights = weights / weights.sum(dim=-1, keepdim=True)
            want = torch.zeros_like(got)
            for t in range(tokens):
                for j in range(c.top_k):
                    e = int(ids[t, j])
                    h = x[t].float() @ w["w13"][e].float().t()
                    want[t] += weights[t, j] * ((F.silu(h[:c.moe_inter]) * h[c.moe_inter:]) @ w["w2"][e].float().t())
            out["moe"] = float((got - want).norm() / want.norm())
        q = self._uniform((2, c.heads, c.head_dim), 1.0)
        k = self._uniform((2, c.kv_heads, context + 1, c.head_dim), 1.0)
        v = self._uniform((2, c.kv_heads, context + 1, c.head_dim), 1.0)
        got = self._decode_attention(q, k, v, self.decode_backend[1]).float()
        kr = k.float().repeat_interleave(c.heads // c.kv_heads, dim=1)
        vr = v.float().repeat_interleave(c.heads // c.kv_heads, dim=1)
        scores = torch.einsum("bhd,bhld->bhl", q.float(), kr) / math.sqrt(c.head_dim)
        want = torch.einsum("bhl,bhld->bhd", torch.softmax(scores, dim=-1), vr).reshape(2, -1)
        out["decode_attention"] = float((got - want).norm() / want.norm())
        return out
