#include "attention/cpu_ops.h"

#include <algorithm>
#include <cstring>

#include "attention/sampler.h"
#include "core/bf16.h"
#include "core/check.h"
#include "kernels/attention.h"
#include "kernels/embedding.h"
#include "kernels/linear.h"
#include "kernels/norm.h"
#include "kernels/rope.h"

namespace afd::attention {
namespace {

using core::DType;
using core::Tensor;

// Checks that `t` is a host tensor of `dtype` with `dims` axes; `what` names it in the message.
void expect(const Tensor& t, DType dtype, int64_t dims, const char* what) {
    AFD_CHECK(t.device().isCpu(), "CpuOps: {} is on {}, not the host", what, t.device().toString());
    AFD_CHECK(t.dtype() == dtype, "CpuOps: {} is {}, expected {}", what, core::dtypeName(t.dtype()),
              core::dtypeName(dtype));
    AFD_CHECK(t.dim() == dims, "CpuOps: {} has shape {}, expected {} axes", what, core::shapeToString(t.shape()), dims);
    AFD_CHECK(t.rawData() != nullptr || t.numel() == 0, "CpuOps: {} has no data", what);
}

void expectShape(const Tensor& t, const core::Shape& shape, const char* what) {
    AFD_CHECK(t.shape() == shape, "CpuOps: {} has shape {}, expected {}", what, core::shapeToString(t.shape()),
              core::shapeToString(shape));
}

const core::Bf16* bf16(const Tensor& t) { return t.data<core::Bf16>(); }

}  // namespace

void CpuOps::roundActivations(float* data, int64_t count) const {
    if (precision_ != CpuPrecision::kBf16Activations) return;
    for (int64_t i = 0; i < count; ++i) data[i] = core::roundToBf16(data[i]);
}

void CpuOps::reserve(const model::ModelConfig& config, const StepLimits& limits) {
    k_rows_.reserve(static_cast<size_t>(limits.max_tokens * config.kvSize()));
    token_seq_.reserve(static_cast<size_t>(limits.max_tokens));
    token_pos_.reserve(static_cast<size_t>(limits.max_tokens));
}

Tensor CpuOps::empty(DType dtype, core::Shape shape) { return Tensor::empty(dtype, std::move(shape)); }

Tensor CpuOps::emptyHost(DType dtype, core::Shape shape) { return Tensor::empty(dtype, std::move(shape)); }

void CpuOps::copy(const Tensor& src, const Tensor& dst) {
    AFD_CHECK(src.device().isCpu() && dst.device().isCpu(), "CpuOps: copy from {} to {}: both must be on the host",
              src.device().toString(), dst.device().toString());
    AFD_CHECK(src.numel() == dst.numel(), "CpuOps: copy of {} into {}: element counts differ",
              core::shapeToString(src.shape()), core::shapeToString(dst.shape()));
    const int64_t n = src.numel();
    if (n == 0) return;
    if (src.dtype() == dst.dtype()) {
        if (src.rawData() != dst.rawData()) std::memmove(dst.rawData(), src.rawData(), src.nbytes());
        return;
    }
    if (src.dtype() == DType::kF32 && dst.dtype() == DType::kBf16) {
        const float* s = src.data<float>();
        core::Bf16* d = dst.data<core::Bf16>();
        for (int64_t i = 0; i < n; ++i) d[i] = core::Bf16(s[i]);
        return;
    }
    if (src.dtype() == DType::kBf16 && dst.dtype() == DType::kF32) {
        const core::Bf16* s = src.data<core::Bf16>();
        float* d = dst.data<float>();
        for (int64_t i = 0; i < n; ++i) d[i] = s[i].toFloat();
        return;
    }
    AFD_FAIL("CpuOps: no conversion from {} to {}", core::dtypeName(src.dtype()), core::dtypeName(dst.dtype()));
}

void CpuOps::embedding(const Tensor& ids, const Tensor& table, const Tensor& out) {
    expect(ids, DType::kI32, 1, "embedding ids");
    expect(table, DType::kBf16, 2, "embedding table");
    expect(out, DType::kF32, 2, "embedding out");
    const int64_t T = ids.size(0);
    const int64_t H = table.size(1);
    expectShape(out, {T, H}, "embedding out");
    kernels::embeddingCpu({T, table.size(0), H, ids.data<int32_t>(), bf16(table), out.data<float>()});
}

void CpuOps::addRmsNorm(const Tensor& residual, const Tensor* delta, const Tensor* bias, const Tensor& weight,
                        float eps, const Tensor& out) {
    expect(residual, DType::kF32, 2, "addRmsNorm residual");
    const int64_t n = residual.size(0);
    const int64_t H = residual.size(1);
    expect(weight, DType::kBf16, 1, "addRmsNorm weight");
    expectShape(weight, {H}, "addRmsNorm weight");
    expect(out, DType::kF32, 2, "addRmsNorm out");
    expectShape(out, {n, H}, "addRmsNorm out");
    AFD_CHECK(bias == nullptr || delta != nullptr, "CpuOps: addRmsNorm bias without a delta");
    float* h = residual.data<float>();
    if (delta != nullptr) {
        expect(*delta, DType::kF32, 2, "addRmsNorm delta");
        expectShape(*delta, {n, H}, "addRmsNorm delta");
        const float* d = delta->data<float>();
        if (bias != nullptr) {
            expect(*bias, DType::kBf16, 1, "addRmsNorm bias");
            expectShape(*bias, {H}, "addRmsNorm bias");
            const core::Bf16* b = bf16(*bias);
            // NOTE: (delta + bias) first, as linearCpu adds a bias to its output before the residual sees it.
            for (int64_t r = 0; r < n; ++r) {
                for (int64_t i = 0; i < H; ++i) h[r * H + i] += d[r * H + i] + b[i].toFloat();
            }
        } else {
            for (int64_t i = 0; i < n * H; ++i) h[i] += d[i];
        }
    }
    kernels::rmsNormCpu({n, H, eps, h, bf16(weight), out.data<float>()});
    roundActivations(out.data<float>(), n * H);
}

void CpuOps::rmsNormRows(const Tensor& residual, const Tensor& rows, const Tensor& weight, float eps,
                         const Tensor& out) {
    expect(residual, DType::kF32, 2, "rmsNormRows residual");
    const int64_t T = residual.size(0);
    const int64_t H = residual.size(1);
    expect(rows, DType::kI32, 1, "rmsNormRows rows");
    const int64_t R = rows.size(0);
    expect(weight, DType::kBf16, 1, "rmsNormRows weight");
    expectShape(weight, {H}, "rmsNormRows weight");
    expect(out, DType::kF32, 2, "rmsNormRows out");
    expectShape(out, {R, H}, "rmsNormRows out");
    const float* h = residual.data<float>();
    float* o = out.data<float>();
    const int32_t* row = rows.data<int32_t>();
    for (int64_t r = 0; r < R; ++r) {
        const int64_t t = row[r];
        AFD_CHECK(t >= 0 && t < T, "CpuOps: rmsNormRows row {} outside the {} rows", t, T);
        std::memcpy(o + r * H, h + t * H, sizeof(float) * H);
    }
    kernels::rmsNormCpu({R, H, eps, o, bf16(weight), o});
    roundActivations(o, R * H);
}

void CpuOps::linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y) {
    expect(x, DType::kF32, 2, "linear x");
    expect(w, DType::kBf16, 2, "linear w");
    expect(y, DType::kF32, 2, "linear y");
    const int64_t M = x.size(0);
    const int64_t K = x.size(1);
    const int64_t N = w.size(0);
    expectShape(w, {N, K}, "linear w");
    expectShape(y, {M, N}, "linear y");
    const core::Bf16* b = nullptr;
    if (bias != nullptr) {
        expect(*bias, DType::kBf16, 1, "linear bias");
        expectShape(*bias, {N}, "linear bias");
        b = bf16(*bias);
    }
    AFD_CHECK(M == 0 || x.rawData() != y.rawData(), "CpuOps: linear y aliases x");
    kernels::linearCpu({M, K, N, x.data<float>(), bf16(w), b, y.data<float>()});
}

void CpuOps::qkvRopeKvWrite(const Tensor& qkv, const Tensor* qkv_bias, const Tensor& q_norm, const Tensor& k_norm,
                            float eps, const RopeTable& rope, const Tensor& positions, const Tensor& slot_mapping,
                            const Tensor& k_cache, const Tensor& v_cache, const Tensor& q_out) {
    expect(qkv, DType::kF32, 2, "qkvRopeKvWrite qkv");
    expect(k_cache, DType::kF32, 4, "qkvRopeKvWrite k_cache");
    expect(v_cache, DType::kF32, 4, "qkvRopeKvWrite v_cache");
    expectShape(v_cache, k_cache.shape(), "qkvRopeKvWrite v_cache");
    expect(q_out, DType::kF32, 2, "qkvRopeKvWrite q_out");
    const int64_t n = qkv.size(0);
    const int64_t num_slots = k_cache.size(0) * k_cache.size(1);
    const int64_t nkv = k_cache.size(2);
    const int64_t hd = k_cache.size(3);
    AFD_CHECK(hd % 2 == 0 && q_out.size(1) % hd == 0, "CpuOps: q_out width {} is not a multiple of head_dim {}",
              q_out.size(1), hd);
    const int64_t nh = q_out.size(1) / hd;
    const int64_t width = (nh + 2 * nkv) * hd;
    expectShape(qkv, {n, width}, "qkvRopeKvWrite qkv");
    expectShape(q_out, {n, nh * hd}, "qkvRopeKvWrite q_out");
    expect(q_norm, DType::kBf16, 1, "qkvRopeKvWrite q_norm");
    expectShape(q_norm, {hd}, "qkvRopeKvWrite q_norm");
    expect(k_norm, DType::kBf16, 1, "qkvRopeKvWrite k_norm");
    expectShape(k_norm, {hd}, "qkvRopeKvWrite k_norm");
    expect(rope.cos, DType::kF32, 2, "qkvRopeKvWrite rope.cos");
    expect(rope.sin, DType::kF32, 2, "qkvRopeKvWrite rope.sin");
    const int64_t half = hd / 2;
    const int64_t max_position = rope.cos.size(0);
    expectShape(rope.cos, {max_position, half}, "qkvRopeKvWrite rope.cos");
    expectShape(rope.sin, {max_position, half}, "qkvRopeKvWrite rope.sin");
    expect(positions, DType::kI32, 1, "qkvRopeKvWrite positions");
    expectShape(positions, {n}, "qkvRopeKvWrite positions");
    expect(slot_mapping, DType::kI32, 1, "qkvRopeKvWrite slot_mapping");
    expectShape(slot_mapping, {n}, "qkvRopeKvWrite slot_mapping");
    const int32_t* pos = positions.data<int32_t>();
    const int32_t* slots = slot_mapping.data<int32_t>();
    for (int64_t t = 0; t < n; ++t) {
        AFD_CHECK(pos[t] >= 0 && pos[t] < max_position, "CpuOps: position {} outside the RoPE table of {}", pos[t],
                  max_position);
        AFD_CHECK(slots[t] >= -1 && slots[t] < num_slots, "CpuOps: slot {} outside the cache's {} slots", slots[t],
                  num_slots);
    }
    if (qkv_bias != nullptr) {
        expect(*qkv_bias, DType::kBf16, 1, "qkvRopeKvWrite qkv_bias");
        expectShape(*qkv_bias, {width}, "qkvRopeKvWrite qkv_bias");
    }
    if (n == 0) return;
    const float* src = qkv.data<float>();
    if (qkv_bias != nullptr) {
        // The projection plus its bias, as linearCpu adds it (one FP32 addition per value).
        biased_.resize(static_cast<size_t>(n * width));
        const core::Bf16* bias = qkv_bias->data<core::Bf16>();
        for (int64_t t = 0; t < n; ++t) {
            for (int64_t c = 0; c < width; ++c) biased_[t * width + c] = src[t * width + c] + bias[c].toFloat();
        }
        src = biased_.data();
    }
    const float* cos = rope.cos.data<float>();
    const float* sin = rope.sin.data<float>();
    const int64_t q_row = nh * hd;
    const int64_t kv_row = nkv * hd;

    float* q = q_out.data<float>();
    for (int64_t t = 0; t < n; ++t) std::memcpy(q + t * q_row, src + t * width, sizeof(float) * q_row);
    kernels::rmsNormCpu({n * nh, hd, eps, q, bf16(q_norm), q});
    for (int64_t t = 0; t < n; ++t) {
        kernels::applyRopeCpu({1, nh, hd, cos + pos[t] * half, sin + pos[t] * half, q + t * q_row});
    }

    k_rows_.resize(static_cast<size_t>(n * kv_row));
    float* k = k_rows_.data();
    for (int64_t t = 0; t < n; ++t) std::memcpy(k + t * kv_row, src + t * width + q_row, sizeof(float) * kv_row);
    kernels::rmsNormCpu({n * nkv, hd, eps, k, bf16(k_norm), k});
    for (int64_t t = 0; t < n; ++t) {
        kernels::applyRopeCpu({1, nkv, hd, cos + pos[t] * half, sin + pos[t] * half, k + t * kv_row});
    }

    roundActivations(q, n * q_row);
    roundActivations(k, n * kv_row);
    float* k_dst = k_cache.data<float>();
    float* v_dst = v_cache.data<float>();
    for (int64_t t = 0; t < n; ++t) {
        if (slots[t] < 0) continue;
        const int64_t off = static_cast<int64_t>(slots[t]) * kv_row;
        std::memcpy(k_dst + off, k + t * kv_row, sizeof(float) * kv_row);
        std::memcpy(v_dst + off, src + t * width + q_row + kv_row, sizeof(float) * kv_row);
        roundActivations(v_dst + off, kv_row);
    }
}

void CpuOps::attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionChunks& chunks,
                       float scale, const Tensor& out) {
    expect(q, DType::kF32, 2, "attention q");
    expect(out, DType::kF32, 2, "attention out");
    expectShape(out, q.shape(), "attention out");
    expect(k_cache, DType::kF32, 4, "attention k_cache");
    expect(v_cache, DType::kF32, 4, "attention v_cache");
    expectShape(v_cache, k_cache.shape(), "attention v_cache");
    expect(chunks.q_start, DType::kI32, 1, "attention q_start");
    expect(chunks.seq_len, DType::kI32, 1, "attention seq_len");
    expect(chunks.block_tables, DType::kI32, 2, "attention block_tables");
    const int64_t n = q.size(0);
    const int64_t S = chunks.numChunks();
    const int64_t hd = k_cache.size(3);
    AFD_CHECK(q.size(1) % hd == 0, "CpuOps: q width {} is not a multiple of head_dim {}", q.size(1), hd);
    expectShape(chunks.q_start, {S + 1}, "attention q_start");
    AFD_CHECK(chunks.block_tables.size(0) == S, "CpuOps: block_tables has {} rows for {} chunks",
              chunks.block_tables.size(0), S);
    const int32_t* q_start = chunks.q_start.data<int32_t>();
    const int32_t* seq_len = chunks.seq_len.data<int32_t>();
    AFD_CHECK(q_start[0] == 0 && q_start[S] == n, "CpuOps: chunks cover rows [{}, {}) of {}", q_start[0], q_start[S],
              n);
    // The per-row arrays pagedAttentionCpu reads, derived from the chunk list's position rule.
    token_seq_.resize(static_cast<size_t>(n));
    token_pos_.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < S; ++i) {
        const int32_t rows = q_start[i + 1] - q_start[i];
        AFD_CHECK(rows >= 0, "CpuOps: chunk {} has q_start {} after {}", i, q_start[i], q_start[i + 1]);
        AFD_CHECK(seq_len[i] == 0 || seq_len[i] >= rows, "CpuOps: chunk {} has {} query rows but seq_len {}", i, rows,
                  seq_len[i]);
        for (int32_t r = q_start[i]; r < q_start[i + 1]; ++r) {
            token_seq_[static_cast<size_t>(r)] = static_cast<int32_t>(i);
            token_pos_[static_cast<size_t>(r)] = seq_len[i] - rows + (r - q_start[i]);
        }
    }
    kernels::PagedAttentionParams p;
    p.layout = {k_cache.size(0),
                k_cache.size(1),
                k_cache.size(2),
                hd,
                chunks.block_tables.data<int32_t>(),
                chunks.block_tables.size(1)};
    p.num_heads = q.size(1) / hd;
    p.scale = scale;
    p.k_cache = k_cache.data<float>();
    p.v_cache = v_cache.data<float>();
    const int64_t row = q.size(1);
    // Runs of real chunks go to the kernel; padding chunks (seq_len 0) output zeros.
    for (int64_t i = 0; i < S;) {
        if (seq_len[i] == 0) {
            std::fill(out.data<float>() + q_start[i] * row, out.data<float>() + q_start[i + 1] * row, 0.0f);
            ++i;
            continue;
        }
        int64_t j = i;
        while (j < S && seq_len[j] > 0) ++j;
        const int64_t first = q_start[i];
        p.num_tokens = q_start[j] - first;
        p.token_seq = token_seq_.data() + first;
        p.token_pos = token_pos_.data() + first;
        p.q = q.data<float>() + first * row;
        p.out = out.data<float>() + first * row;
        kernels::pagedAttentionCpu(p);
        roundActivations(p.out, p.num_tokens * row);
        i = j;
    }
}

void CpuOps::sample(const Tensor& logits, std::span<const SampleRequest> requests, std::span<int32_t> tokens) {
    expect(logits, DType::kF32, 2, "sample logits");
    const int64_t R = logits.size(0);
    const int64_t V = logits.size(1);
    AFD_CHECK(static_cast<int64_t>(requests.size()) == R && static_cast<int64_t>(tokens.size()) == R,
              "CpuOps: sample of {} rows with {} requests into {} tokens", R, requests.size(), tokens.size());
    for (int64_t r = 0; r < R; ++r) {
        const SampleRequest& req = requests[static_cast<size_t>(r)];
        tokens[static_cast<size_t>(r)] = sampleToken(logits.data<float>() + r * V, V, *req.params, *req.rng);
    }
}

}  // namespace afd::attention
