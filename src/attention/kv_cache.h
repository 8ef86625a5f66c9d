// Paged KV cache (CPU) and its block allocator.
//
// Per layer, keys and values are pools [num_blocks, block_size, num_kv_heads, head_dim] of FP32; a sequence owns
// a list of block ids (its block table), allocated as it grows and freed when it finishes or is preempted.
// Not thread-safe: owned and used by the engine thread.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/tensor.h"
#include "kernels/attention.h"

namespace afd::attention {

struct KvCacheShape {
    int64_t num_layers = 0;
    int64_t num_blocks = 0;
    int64_t block_size = 16;
    int64_t num_kv_heads = 0;
    int64_t head_dim = 0;
    uint64_t bytes() const;
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
    explicit KvCache(const KvCacheShape& shape);

    const KvCacheShape& shape() const { return shape_; }
    float* keys(int64_t layer) { return keys_[static_cast<size_t>(layer)].data<float>(); }
    float* values(int64_t layer) { return values_[static_cast<size_t>(layer)].data<float>(); }
    kernels::PagedKvLayout layout(const int32_t* block_tables, int64_t max_blocks_per_seq) const;
    BlockAllocator& allocator() { return allocator_; }

private:
    KvCacheShape shape_;
    std::vector<core::Tensor> keys_;
    std::vector<core::Tensor> values_;
    BlockAllocator allocator_;
};

}  // namespace afd::attention
