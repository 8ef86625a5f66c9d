// DeviceOps: the per-device operations the model runner composes (DESIGN.md §4, attention). One implementation per
// device kind (CpuOps; CudaOps in attention/cuda), chosen at run time; the runner, the KV cache, the engine and the MLP
// backends hold a DeviceOps& and never branch on the device.
//
// Dtypes: weights are BF16 on every device. The residual stream and the logits are FP32 on every device. Everything
// else the ops produce — normed activations, GEMM outputs (except logits), q, the attention output, the KV cache — is
// in activationDType(): FP32 on the CPU, BF16 on CUDA (FP32 accumulation inside every op).
//
// Streams: every op and copy is enqueued, in call order, on the ops' one stream and may return before it has run
// (the CPU runs each call to completion before returning). Work of other components ordered on "the ops' stream"
// (the MLP backends) is ordered with these ops. synchronize() blocks the host until all enqueued work is done.
//
// Tensors: every tensor argument carries its device and dtype and is checked (AFD_CHECK) against the op's contract.
// Tensors are handles: outputs are passed as `const core::Tensor&` too, and the op writes the memory they point at.
// Outputs never alias inputs unless the op says so. Index tensors (ids, positions, slots, rows, chunk lists) are I32.
// Ops allocate nothing and synchronise nothing (a captured CUDA graph replays them), except where a comment says so.
//
// Graphs: a device that supportsGraphs() records a step's ops once (captureGraph) and replays them (replayGraph); the
// engine does so for decode steps (model_runner.h).
//
// Threads: one thread at a time (the engine thread).
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <vector>

#include "attention/sampling_params.h"
#include "core/check.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/model_config.h"

namespace afd::attention {

// The most a step may hold, fixed when the engine starts (it sizes every buffer of the step).
struct StepLimits {
    int64_t max_tokens = 0;         // rows of a step (max_num_batched_tokens)
    int64_t max_chunks = 0;         // chunks of one stage, and rows that sample (max_num_seqs, at most max_tokens)
    int64_t block_table_width = 0;  // the most blocks one sequence holds (max_blocks_per_seq)
    int64_t max_positions = 0;      // every position is below it (rows of the RoPE table; a bound on seq_len)
    int64_t block_size = 0;         // tokens per KV cache block (0: not known; the attention op checks it then)
    // Rows of the decode steps the engine captures in CUDA graphs, ascending (empty: none). Ops prepare what a
    // capture of steps of these sizes needs (GEMM algorithms), since nothing may be chosen inside a capture.
    std::vector<int64_t> graph_batch_sizes;
};

// One stage's attention work as the attention op reads it: S chunks, each a run of consecutive query rows of one
// sequence. Chunk i owns query rows [q_start[i], q_start[i+1]) (stage-relative; n_i rows); query row r of it sits at
// position seq_len[i] - n_i + (r - q_start[i]) of its sequence and attends to positions [0, that position], whose
// K/V the sequence's block table row lists (position p: slot p % block_size of block block_tables[i][p / block_size]).
// A chunk with seq_len 0 is padding: its rows' output is zero and its block table row is never read.
struct AttentionChunks {
    core::Tensor q_start;       // [S + 1] I32 on the ops' device; q_start[0] = 0, q_start[S] = the stage's rows
    core::Tensor seq_len;       // [S] I32: the sequence's KV length after the chunk's tokens
    core::Tensor block_tables;  // [S, max_blocks_per_seq] I32, -1 padded
    // Host-known bounds over the chunks (a kernel may size its grid from them): every n_i <= max_query_len and every
    // seq_len[i] <= max_seq_len. A captured step passes bounds that hold for every replay.
    int64_t max_query_len = 0;
    int64_t max_seq_len = 0;
    int64_t numChunks() const { return seq_len.size(0); }
};

// RoPE cos/sin for positions [0, max_position): row p holds cos/sin(p * inv_freq[i]), i < head_dim / 2, as
// kernels::ropeTableCpu computes them for the model's head_dim (the model runner fills it once at start).
struct RopeTable {
    core::Tensor cos;  // [max_position, head_dim / 2] F32 on the ops' device
    core::Tensor sin;  // [max_position, head_dim / 2] F32
};

// What the sampler needs of one row of logits.
struct SampleRequest {
    const SamplingParams* params = nullptr;
    std::mt19937_64* rng = nullptr;  // the sequence's own random stream (host samplers draw from it)
    int64_t num_sampled = 0;         // tokens the sequence sampled before this one (counter-based device samplers)
};

class DeviceOps {
public:
    DeviceOps() = default;
    virtual ~DeviceOps() = default;
    DeviceOps(const DeviceOps&) = delete;
    DeviceOps& operator=(const DeviceOps&) = delete;

    virtual core::Device device() const = 0;
    // Dtype of activations and of the KV cache: kF32 on the CPU, kBf16 on CUDA.
    virtual core::DType activationDType() const = 0;
    // The stream every op is enqueued on, as the device's handle (a cudaStream_t on CUDA; nullptr on the CPU), for
    // components that enqueue their own work in order with the ops (MLP backends, device connectors).
    virtual void* stream() const = 0;

    // Allocates the scratch the ops need for steps of `config` within `limits` (attention partials, GEMM workspace,
    // sampling parameters …), so that no op allocates. The model runner calls it once, before any op.
    virtual void reserve(const model::ModelConfig& config, const StepLimits& limits) = 0;

    // The head_dim at which this device stores attention heads of a model's `head_dim` (call it hs below): q, the
    // KV cache, the attention output, q_norm / k_norm, qkv_proj's rows and o_proj's columns of each head. The model's
    // head_dim itself, or (CUDA, a head_dim its kernels do not take) a larger one whose extra lanes are zero
    // everywhere: then qkv_proj has zero rows and o_proj zero columns there (device weights), and qkvRopeKvWrite
    // writes zeros there.
    virtual int64_t storedHeadDim(int64_t head_dim) const { return head_dim; }

    // --- Memory -------------------------------------------------------------------------------------------------
    // Uninitialised memory on device(), owned by the returned tensor. May allocate (call at start, not per step).
    virtual core::Tensor empty(core::DType dtype, core::Shape shape) = 0;
    // Uninitialised host memory that copies to and from device() go fastest from (pinned on CUDA).
    virtual core::Tensor emptyHost(core::DType dtype, core::Shape shape) = 0;
    // dst = src element for element (same element count); each on the host or on device(). Dtypes equal, or F32 and
    // BF16 either way (round to nearest even). Enqueued on the stream: host memory on either side must stay valid,
    // and a host dst unread, until the stream has passed the copy (synchronize()).
    virtual void copy(const core::Tensor& src, const core::Tensor& dst) = 0;
    virtual void synchronize() = 0;

    // --- Model ops (H = hidden size, T/n = rows) -------------------------------------------------------------------
    // out [T, H] F32 = table[ids[t]]; ids [T] I32 (each in [0, V)), table [V, H] BF16.
    virtual void embedding(const core::Tensor& ids, const core::Tensor& table, const core::Tensor& out) = 0;

    // The op between two blocks, on residual [n, H] F32 (in/out) and weight [H] BF16:
    //   if delta: residual += (delta + bias)    delta [n, H] activation dtype or F32; bias [H] BF16 (optional; only
    //                                           with delta), added to delta before the residual
    //   out [n, H] activation dtype = weight * residual * rsqrt(mean(residual^2) + eps)
    virtual void addRmsNorm(const core::Tensor& residual, const core::Tensor* delta, const core::Tensor* bias,
                            const core::Tensor& weight, float eps, const core::Tensor& out) = 0;

    // The final norm on the rows that sample: out[r] = weight * rmsnorm(residual[rows[r]]), with residual [T, H] F32
    // (read only), rows [R] I32 in [0, T), out [R, H] activation dtype.
    virtual void rmsNormRows(const core::Tensor& residual, const core::Tensor& rows, const core::Tensor& weight,
                             float eps, const core::Tensor& out) = 0;

    // y [M, N] = x [M, K] · w^T (+ bias): x activation dtype, w [N, K] BF16, bias [N] BF16 (optional), y activation
    // dtype or F32 (the LM head writes FP32 logits). Each output row depends only on its input row (batch invariance).
    virtual void linear(const core::Tensor& x, const core::Tensor& w, const core::Tensor* bias,
                        const core::Tensor& y) = 0;

    // After the fused QKV projection, for n tokens:
    //   qkv [n, (nh + 2 nkv) hd] activation dtype or FP32, each row q heads | k heads | v heads, plus qkv_bias
    //   [(nh + 2 nkv) hd] BF16 when given (attention_bias);
    //   q_out [n, nh hd] activation dtype = rope(rmsnorm per head of q, weight q_norm [hd] BF16);
    //   k = rope(rmsnorm per head of k, k_norm [hd] BF16) and v are written to slot slot_mapping[t] of k_cache and
    //   v_cache [num_blocks, block_size, nkv, hd] activation dtype (slot = block * block_size + offset; -1: token t's
    //   K/V are not written);
    //   rope at positions[t] (rows of `rope`); positions, slot_mapping [n] I32.
    // nkv and hd come from the cache's shape, nh from q_out's. hd is the stored head_dim (storedHeadDim); the model's
    // head_dim is twice the rope table's width: where it is below hd, the norm and the rotation see each head's first
    // head_dim lanes only, and q_out, k and v get zeros in the others.
    virtual void qkvRopeKvWrite(const core::Tensor& qkv, const core::Tensor* qkv_bias, const core::Tensor& q_norm,
                                const core::Tensor& k_norm, float eps, const RopeTable& rope,
                                const core::Tensor& positions, const core::Tensor& slot_mapping,
                                const core::Tensor& k_cache, const core::Tensor& v_cache,
                                const core::Tensor& q_out) = 0;

    // Causal grouped-query attention of one stage over the paged cache (AttentionChunks states which positions each
    // query row reads): q [n, nh hd] and out [n, nh hd] activation dtype; k_cache, v_cache as in qkvRopeKvWrite
    // (the stage's own K/V already written); query head h reads KV head h / (nh / nkv); softmax(q·k * scale) in FP32
    // (scale from the model's head_dim: padded lanes add nothing to q·k).
    virtual void attention(const core::Tensor& q, const core::Tensor& k_cache, const core::Tensor& v_cache,
                           const AttentionChunks& chunks, float scale, const core::Tensor& out) = 0;

    // tokens[r] = the token sampled from logits row r ([R, V] F32) under requests[r] (greedy at temperature 0; else
    // temperature, top-k, top-p from the request's random stream). Blocks until the ids are on the host.
    virtual void sample(const core::Tensor& logits, std::span<const SampleRequest> requests,
                        std::span<int32_t> tokens) = 0;

    // --- Graphs (CUDA) --------------------------------------------------------------------------------------------
    // Whether captureGraph and replayGraph work on this device. Devices without graphs run every step eagerly.
    virtual bool supportsGraphs() const { return false; }
    // Records what `enqueue` puts on the ops' stream (ops, and the work of components on that stream) into a graph
    // stored under `key` (replacing one there; the model runner keys its decode graphs by batch size, so one engine
    // per ops) instead of running it. `enqueue` may only enqueue: no allocation, no synchronisation, no host read of
    // device data; replays read and write the memory it used. Not inside another capture, and with nothing else
    // enqueued on the stream meanwhile. An error from `enqueue` (a Status or an exception, which is rethrown) ends the
    // capture and stores nothing.
    virtual core::Status captureGraph(int64_t key, const std::function<core::Status()>& enqueue) {
        (void)key;
        (void)enqueue;
        return core::unsupported("{} has no graphs", device().toString());
    }
    // Enqueues the graph stored under `key` on the ops' stream (AFD_CHECK: one is stored).
    virtual void replayGraph(int64_t key) {
        AFD_FAIL("{} has no graph {}: it has no graphs", device().toString(), key);
    }
    // Graphs stored, and the device memory they hold (measured when they were captured).
    virtual int64_t numGraphs() const { return 0; }
    virtual uint64_t graphMemoryBytes() const { return 0; }
};

}  // namespace afd::attention
