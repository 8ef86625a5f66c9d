// CudaOps: the model ops, each checked against DeviceOps' contract and mapped to its kernel on the ops' stream.
#include <cuda_runtime.h>

#include <algorithm>

#include "attention/cuda/cuda_ops.h"
#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/dense_cuda.h"
#include "kernels/paged_attention_cuda.h"

namespace afd::attention {
namespace {

using core::DType;
using core::Tensor;

// Checks that `t` is a tensor of `dtype` with `dims` axes on `device`; `what` names it in the message.
void expect(const Tensor& t, DType dtype, int64_t dims, const core::Device& device, const char* what) {
    AFD_CHECK(t.device() == device, "CudaOps: {} is on {}, not {}", what, t.device().toString(), device.toString());
    AFD_CHECK(t.dtype() == dtype, "CudaOps: {} is {}, expected {}", what, core::dtypeName(t.dtype()),
              core::dtypeName(dtype));
    AFD_CHECK(t.dim() == dims, "CudaOps: {} has shape {}, expected {} axes", what, core::shapeToString(t.shape()),
              dims);
    AFD_CHECK(t.rawData() != nullptr || t.numel() == 0, "CudaOps: {} has no data", what);
}

void expectShape(const Tensor& t, const core::Shape& shape, const char* what) {
    AFD_CHECK(t.shape() == shape, "CudaOps: {} has shape {}, expected {}", what, core::shapeToString(t.shape()),
              core::shapeToString(shape));
}

const core::Bf16* bf16(const Tensor& t) { return static_cast<const core::Bf16*>(t.rawData()); }
core::Bf16* bf16Out(const Tensor& t) { return static_cast<core::Bf16*>(t.rawData()); }
const uint16_t* bits(const Tensor& t) { return static_cast<const uint16_t*>(t.rawData()); }

}  // namespace

void CudaOps::embedding(const Tensor& ids, const Tensor& table, const Tensor& out) {
    const core::Device dev = device();
    expect(ids, DType::kI32, 1, dev, "embedding ids");
    expect(table, DType::kBf16, 2, dev, "embedding table");
    expect(out, DType::kF32, 2, dev, "embedding out");
    const int64_t T = ids.size(0);
    const int64_t H = table.size(1);
    expectShape(out, {T, H}, "embedding out");
    makeCurrent();
    kernels::embeddingCuda({T, table.size(0), H, ids.data<int32_t>(), bf16(table), out.data<float>()}, cudaStream());
}

void CudaOps::addRmsNorm(const Tensor& residual, const Tensor* delta, const Tensor* bias, const Tensor& weight,
                         float eps, const Tensor& out) {
    const core::Device dev = device();
    expect(residual, DType::kF32, 2, dev, "addRmsNorm residual");
    const int64_t n = residual.size(0);
    const int64_t H = residual.size(1);
    expect(weight, DType::kBf16, 1, dev, "addRmsNorm weight");
    expectShape(weight, {H}, "addRmsNorm weight");
    expect(out, DType::kBf16, 2, dev, "addRmsNorm out");
    expectShape(out, {n, H}, "addRmsNorm out");
    AFD_CHECK(bias == nullptr || delta != nullptr, "CudaOps: addRmsNorm bias without a delta");
    kernels::AddRmsNormParams p;
    p.num_tokens = n;
    p.hidden = H;
    p.eps = eps;
    p.residual = residual.data<float>();
    p.weight = bf16(weight);
    p.out = bf16Out(out);
    if (delta != nullptr) {
        AFD_CHECK(delta->device() == dev && delta->dim() == 2 &&
                      (delta->dtype() == DType::kBf16 || delta->dtype() == DType::kF32),
                  "CudaOps: addRmsNorm delta must be [n, H] BF16 or F32 on {}, got {} on {}", dev.toString(),
                  core::dtypeName(delta->dtype()), delta->device().toString());
        expectShape(*delta, {n, H}, "addRmsNorm delta");
        p.delta = delta->rawData();
        p.delta_dtype = delta->dtype() == DType::kF32 ? kernels::ActDType::kF32 : kernels::ActDType::kBf16;
        if (bias != nullptr) {
            expect(*bias, DType::kBf16, 1, dev, "addRmsNorm bias");
            expectShape(*bias, {H}, "addRmsNorm bias");
            p.bias = bf16(*bias);
        }
    }
    makeCurrent();
    kernels::addRmsNormCuda(p, cudaStream());
}

void CudaOps::rmsNormRows(const Tensor& residual, const Tensor& rows, const Tensor& weight, float eps,
                          const Tensor& out) {
    const core::Device dev = device();
    expect(residual, DType::kF32, 2, dev, "rmsNormRows residual");
    const int64_t H = residual.size(1);
    expect(rows, DType::kI32, 1, dev, "rmsNormRows rows");
    const int64_t R = rows.size(0);
    expect(weight, DType::kBf16, 1, dev, "rmsNormRows weight");
    expectShape(weight, {H}, "rmsNormRows weight");
    expect(out, DType::kBf16, 2, dev, "rmsNormRows out");
    expectShape(out, {R, H}, "rmsNormRows out");
    kernels::AddRmsNormParams p;
    p.num_tokens = residual.size(0);
    p.hidden = H;
    p.eps = eps;
    p.residual = residual.data<float>();
    p.weight = bf16(weight);
    p.rows = rows.data<int32_t>();
    p.num_rows = R;
    p.out = bf16Out(out);
    makeCurrent();
    kernels::addRmsNormCuda(p, cudaStream());
}

void CudaOps::linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y) {
    const core::Device dev = device();
    expect(x, DType::kBf16, 2, dev, "linear x");
    expect(w, DType::kBf16, 2, dev, "linear w");
    AFD_CHECK(y.dtype() == DType::kBf16 || y.dtype() == DType::kF32, "CudaOps: linear y must be BF16 or F32, got {}",
              core::dtypeName(y.dtype()));
    expect(y, y.dtype(), 2, dev, "linear y");
    const int64_t M = x.size(0);
    const int64_t K = x.size(1);
    const int64_t N = w.size(0);
    expectShape(w, {N, K}, "linear w");
    expectShape(y, {M, N}, "linear y");
    kernels::cuda::GemmParams p;
    p.m = M;
    p.n = N;
    p.k = K;
    p.x = bf16(x);
    p.ldx = K;
    p.w = bf16(w);
    p.y = y.rawData();
    p.ldy = N;
    p.out_dtype = y.dtype() == DType::kF32 ? kernels::cuda::GemmOutDType::kF32 : kernels::cuda::GemmOutDType::kBf16;
    if (bias != nullptr) {
        expect(*bias, DType::kBf16, 1, dev, "linear bias");
        expectShape(*bias, {N}, "linear bias");
        AFD_CHECK(y.dtype() == DType::kBf16, "CudaOps: linear with a bias writes BF16 y");
        p.bias = bf16(*bias);
    }
    if (M == 0) return;
    AFD_CHECK(x.rawData() != y.rawData(), "CudaOps: linear y aliases x");
    makeCurrent();
    gemm_->matmul(p, cudaStream());
}

void CudaOps::qkvRopeKvWrite(const Tensor& qkv, const Tensor* qkv_bias, const Tensor& q_norm, const Tensor& k_norm,
                             float eps, const RopeTable& rope, const Tensor& positions, const Tensor& slot_mapping,
                             const Tensor& k_cache, const Tensor& v_cache, const Tensor& q_out) {
    const core::Device dev = device();
    AFD_CHECK(qkv.dtype() == DType::kBf16 || qkv.dtype() == DType::kF32,
              "CudaOps: qkvRopeKvWrite qkv must be bf16 or f32");
    expect(qkv, qkv.dtype(), 2, dev, "qkvRopeKvWrite qkv");
    expect(k_cache, DType::kBf16, 4, dev, "qkvRopeKvWrite k_cache");
    expect(v_cache, DType::kBf16, 4, dev, "qkvRopeKvWrite v_cache");
    expectShape(v_cache, k_cache.shape(), "qkvRopeKvWrite v_cache");
    expect(q_out, DType::kBf16, 2, dev, "qkvRopeKvWrite q_out");
    const int64_t n = qkv.size(0);
    const int64_t nkv = k_cache.size(2);
    const int64_t hd = k_cache.size(3);
    AFD_CHECK(hd % 2 == 0 && q_out.size(1) % hd == 0, "CudaOps: q_out width {} is not a multiple of head_dim {}",
              q_out.size(1), hd);
    const int64_t nh = q_out.size(1) / hd;
    expectShape(qkv, {n, (nh + 2 * nkv) * hd}, "qkvRopeKvWrite qkv");
    expectShape(q_out, {n, nh * hd}, "qkvRopeKvWrite q_out");
    expect(q_norm, DType::kBf16, 1, dev, "qkvRopeKvWrite q_norm");
    expectShape(q_norm, {hd}, "qkvRopeKvWrite q_norm");
    expect(k_norm, DType::kBf16, 1, dev, "qkvRopeKvWrite k_norm");
    expectShape(k_norm, {hd}, "qkvRopeKvWrite k_norm");
    expect(rope.cos, DType::kF32, 2, dev, "qkvRopeKvWrite rope.cos");
    expect(rope.sin, DType::kF32, 2, dev, "qkvRopeKvWrite rope.sin");
    const int64_t max_position = rope.cos.size(0);
    // The model's head_dim, which a stored head may pad (storedHeadDim).
    const int64_t rope_dim = 2 * rope.cos.size(1);
    AFD_CHECK(rope_dim >= 2 && rope_dim <= hd, "CudaOps: a RoPE table of {} angles for heads of {} lanes",
              rope.cos.size(1), hd);
    expectShape(rope.sin, {max_position, rope_dim / 2}, "qkvRopeKvWrite rope.sin");
    expect(positions, DType::kI32, 1, dev, "qkvRopeKvWrite positions");
    expectShape(positions, {n}, "qkvRopeKvWrite positions");
    expect(slot_mapping, DType::kI32, 1, dev, "qkvRopeKvWrite slot_mapping");
    expectShape(slot_mapping, {n}, "qkvRopeKvWrite slot_mapping");
    kernels::QkvRopeParams p;
    p.num_tokens = n;
    p.num_heads = nh;
    p.num_kv_heads = nkv;
    p.head_dim = hd;
    p.rope_dim = rope_dim;
    p.eps = eps;
    p.qkv = qkv.rawData();
    p.qkv_dtype = qkv.dtype() == DType::kF32 ? kernels::ActDType::kF32 : kernels::ActDType::kBf16;
    if (qkv_bias != nullptr) {
        expect(*qkv_bias, DType::kBf16, 1, dev, "qkvRopeKvWrite qkv_bias");
        expectShape(*qkv_bias, {(nh + 2 * nkv) * hd}, "qkvRopeKvWrite qkv_bias");
        p.qkv_bias = bf16(*qkv_bias);
    }
    p.q_norm = bf16(q_norm);
    p.k_norm = bf16(k_norm);
    p.positions = positions.data<int32_t>();
    p.rope_cos = rope.cos.data<float>();
    p.rope_sin = rope.sin.data<float>();
    p.max_position = max_position;
    p.slot_mapping = slot_mapping.data<int32_t>();
    p.num_blocks = k_cache.size(0);
    p.block_size = k_cache.size(1);
    p.q_out = bf16Out(q_out);
    p.k_cache = bf16Out(k_cache);
    p.v_cache = bf16Out(v_cache);
    makeCurrent();
    kernels::qkvRopeCuda(p, cudaStream());
}

void CudaOps::attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionChunks& chunks,
                        float scale, const Tensor& out) {
    const core::Device dev = device();
    expect(q, DType::kBf16, 2, dev, "attention q");
    expect(out, DType::kBf16, 2, dev, "attention out");
    expectShape(out, q.shape(), "attention out");
    expect(k_cache, DType::kBf16, 4, dev, "attention k_cache");
    expect(v_cache, DType::kBf16, 4, dev, "attention v_cache");
    expectShape(v_cache, k_cache.shape(), "attention v_cache");
    expect(chunks.q_start, DType::kI32, 1, dev, "attention q_start");
    expect(chunks.seq_len, DType::kI32, 1, dev, "attention seq_len");
    expect(chunks.block_tables, DType::kI32, 2, dev, "attention block_tables");
    const int64_t S = chunks.numChunks();
    const int64_t hd = k_cache.size(3);
    AFD_CHECK(q.size(1) % hd == 0, "CudaOps: q width {} is not a multiple of head_dim {}", q.size(1), hd);
    expectShape(chunks.q_start, {S + 1}, "attention q_start");
    AFD_CHECK(chunks.block_tables.size(0) == S, "CudaOps: block_tables has {} rows for {} chunks",
              chunks.block_tables.size(0), S);
    if (S == 0) return;
    kernels::PagedAttentionCudaParams p;
    p.num_seqs = static_cast<int>(S);
    p.num_heads = static_cast<int>(q.size(1) / hd);
    p.num_kv_heads = static_cast<int>(k_cache.size(2));
    p.head_dim = static_cast<int>(hd);
    p.block_size = static_cast<int>(k_cache.size(1));
    p.scale = scale;
    p.q = bits(q);
    p.k_cache = bits(k_cache);
    p.v_cache = bits(v_cache);
    p.q_start = chunks.q_start.data<int32_t>();
    p.seq_len = chunks.seq_len.data<int32_t>();
    p.block_tables = chunks.block_tables.data<int32_t>();
    p.max_blocks_per_seq = static_cast<int>(chunks.block_tables.size(1));
    p.out = static_cast<uint16_t*>(out.rawData());
    p.max_q_len = static_cast<int>(std::max<int64_t>(chunks.max_query_len, 1));
    p.max_seq_len = static_cast<int>(chunks.max_seq_len);
    makeCurrent();
    const size_t needed =
        kernels::pagedAttentionWorkspaceBytes(p.num_seqs, p.max_q_len, p.num_heads, p.head_dim, p.max_seq_len);
    if (needed > attention_workspace_.bytes()) {
        // NOTE: reserve() sizes the workspace for the engine's steps; a larger call (outside an engine, never in a
        // capture) grows it here.
        cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
        AFD_CUDA_CHECK(cudaStreamIsCapturing(cudaStream(), &capturing));
        AFD_CHECK(capturing == cudaStreamCaptureStatusNone,
                  "CudaOps: attention needs {} bytes of workspace inside a capture, reserve() sized {}", needed,
                  attention_workspace_.bytes());
        synchronize();
        attention_workspace_ = kernels::cuda::DeviceBuffer(needed);
    }
    p.workspace = attention_workspace_.get();
    p.workspace_bytes = attention_workspace_.bytes();
    kernels::pagedAttentionCuda(p, cudaStream());
}

}  // namespace afd::attention
