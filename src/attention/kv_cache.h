// Paged KV cache on the ops' device and its block allocator (host).
//
// Per layer, keys and values are pools [num_blocks, block_size, num_kv_heads, head_dim] in the ops' activation dtype
// (FP32 on the CPU, BF16 on CUDA), allocated once through DeviceOps and uninitialised (attention reads only positions
// written earlier). A sequence owns a list of block ids (its block table), allocated as it grows and freed when it
// finishes or is preempted. Not thread-safe: owned and used by the engine thread.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "attention/device_ops.h"
#include "core/tensor.h"

namespace afd::attention {

struct KvCacheShape {
    int64_t num_layers = 0;
    int64_t num_blocks = 0;
    int64_t block_size = 16;
    int64_t num_kv_heads = 0;
    int64_t head_dim = 0;
    core::DType dtype = core::DType::kF32;
    uint64_t bytes() const;  // keys and values of every layer
};

class BlockAllocator {
public:
    explicit BlockAllocator(int64_t num_blocks);
    std::optional<int32_t> allocate();
    void release(int32_t block);
    int64_t numFree() const { return static_cast<int64_t>(free_.size()); }
    int64_t numBlocks() const { return num_blocks_; }

private:
    int64_t num_blocks_;
    std::vector<int32_t> free_;  // LIFO: recently freed blocks are reused first
    std::vector<uint8_t> in_use_;
};

class KvCache {
public:
    // shape.dtype must be ops.activationDType(). Throws std::bad_alloc (or core::Error) when the pools do not fit.
    KvCache(const KvCacheShape& shape, DeviceOps& ops);

    const KvCacheShape& shape() const { return shape_; }
    // [num_blocks, block_size, num_kv_heads, head_dim] on the ops' device.
    const core::Tensor& keys(int64_t layer) const { return keys_.at(static_cast<size_t>(layer)); }
    const core::Tensor& values(int64_t layer) const { return values_.at(static_cast<size_t>(layer)); }
    BlockAllocator& allocator() { return allocator_; }
    const BlockAllocator& allocator() const { return allocator_; }

private:
    KvCacheShape shape_;
    std::vector<core::Tensor> keys_;
    std::vector<core::Tensor> values_;
    BlockAllocator allocator_;
};

}  // namespace afd::attention
