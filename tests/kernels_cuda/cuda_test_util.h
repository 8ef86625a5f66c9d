// Helpers of the CUDA op harness: RAII device buffers, random inputs, poisoning, error norms, and fp32 CPU
// references of the MoE stages and the router written independently of the CUDA code.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/bf16.h"
#include "kernels/cuda/device_info.h"

// Skips the calling test without a CUDA device, or on one that is not sm_90 (the kernels are built for sm_90a only).
#define AFD_REQUIRE_SM90()                                                    \
    do {                                                                      \
        if (::afd::kernels::cuda::deviceCount() == 0) {                       \
            GTEST_SKIP() << "no CUDA device";                                 \
        }                                                                     \
        if (::afd::kernels::cuda::deviceInfo(0).compute_major != 9) {         \
            GTEST_SKIP() << "the kernels are built for sm_90a (Hopper) only"; \
        }                                                                     \
    } while (0)

namespace afd::kernels::test {

// Owns one cudaMalloc allocation; copies to and from host vectors. Throws core::Error on a CUDA failure.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t bytes);
    ~DeviceBuffer();
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    DeviceBuffer(DeviceBuffer&& other) noexcept;
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;

    template <typename T>
    static DeviceBuffer from(const std::vector<T>& host) {
        DeviceBuffer b(host.size() * sizeof(T));
        b.upload(host.data(), host.size() * sizeof(T));
        return b;
    }
    template <typename T>
    std::vector<T> download(size_t count) const {
        std::vector<T> host(count);
        downloadTo(host.data(), count * sizeof(T));
        return host;
    }

    void upload(const void* src, size_t bytes);
    void downloadTo(void* dst, size_t bytes) const;
    // Fills every byte with 0xFF: bf16 and fp32 NaN, int32 -1.
    void poison();

    void* get() const { return ptr_; }
    template <typename T>
    T* as() const {
        return static_cast<T*>(ptr_);
    }
    size_t bytes() const { return bytes_; }

private:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

std::vector<core::Bf16> randomBf16(size_t count, float scale, std::mt19937& rng);

// Relative L2 error ||got - want|| / ||want||; infinity when got holds a NaN or infinity.
double relativeL2(const std::vector<float>& got, const std::vector<float>& want);
std::vector<float> toFloat(const std::vector<core::Bf16>& v);

// Routing kinds of the harness.
enum class Routing {
    kUniform,       // K distinct experts per token, uniformly
    kSkewed,        // K distinct experts per token, Zipf-like (expert r drawn with weight 1 / (r + 1))
    kOneExpert,     // every token's entry 0 on one expert, the other entries -1
    kWithUnserved,  // uniform, then about a quarter of the entries set to -1
    kNoneServed     // every entry -1 (all experts live elsewhere)
};

struct RoutingTable {
    std::vector<int32_t> ids;    // [T * K]
    std::vector<float> weights;  // [T * K], positive
};
RoutingTable makeRouting(int64_t tokens, int64_t experts, int64_t top_k, Routing kind, std::mt19937& rng);

// Per-entry reference of the gate-up stage: h[t * K + j] = silu(Wg x_t) * (Wu x_t) for expert ids[t, j] (fp32;
// rows of unserved entries are left empty).
std::vector<std::vector<float>> referenceGateUp(const std::vector<core::Bf16>& x, const std::vector<core::Bf16>& w13,
                                                const std::vector<int32_t>& ids, int64_t tokens, int64_t hidden,
                                                int64_t inter, int64_t top_k);
// y = W2[e] h for one row h of length inter (fp32).
std::vector<float> referenceDownRow(const std::vector<core::Bf16>& w2, int64_t expert, const float* h, int64_t hidden,
                                    int64_t inter);
// The whole layer in fp32: out[t] = sum_j w[t, j] * W2 (silu(Wg x) * Wu x).
std::vector<float> referenceMoe(const std::vector<core::Bf16>& x, const std::vector<core::Bf16>& w13,
                                const std::vector<core::Bf16>& w2, const RoutingTable& routing, int64_t tokens,
                                int64_t hidden, int64_t inter, int64_t top_k);

struct RouterReference {
    std::vector<float> logits;   // [T, E]
    std::vector<float> probs;    // [T, E] softmax
    std::vector<int32_t> ids;    // [T, K] descending probability, ties to the lower id
    std::vector<float> weights;  // [T, K]
};
RouterReference referenceRouter(const std::vector<core::Bf16>& x, const std::vector<core::Bf16>& gate_w, int64_t tokens,
                                int64_t hidden, int64_t experts, int64_t top_k, bool renormalize);

}  // namespace afd::kernels::test
