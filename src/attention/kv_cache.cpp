#include "attention/kv_cache.h"

#include "core/check.h"

namespace afd::attention {

uint64_t KvCacheShape::bytes() const {
    return 2ull * static_cast<uint64_t>(num_layers * num_blocks * block_size * num_kv_heads * head_dim) * sizeof(float);
}

BlockAllocator::BlockAllocator(int64_t num_blocks) : num_blocks_(num_blocks), in_use_(static_cast<size_t>(num_blocks)) {
    AFD_CHECK(num_blocks > 0 && num_blocks < (1ll << 31), "block count {} out of range", num_blocks);
    free_.reserve(static_cast<size_t>(num_blocks));
    for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

std::optional<int32_t> BlockAllocator::allocate() {
    if (free_.empty()) return std::nullopt;
    const int32_t b = free_.back();
    free_.pop_back();
    in_use_[static_cast<size_t>(b)] = 1;
    return b;
}

void BlockAllocator::release(int32_t block) {
    AFD_CHECK(block >= 0 && block < num_blocks_ && in_use_[static_cast<size_t>(block)],
              "release of block {} not in use", block);
    in_use_[static_cast<size_t>(block)] = 0;
    free_.push_back(block);
}

KvCache::KvCache(const KvCacheShape& shape) : shape_(shape), allocator_(shape.num_blocks) {
    AFD_CHECK(shape.num_layers > 0 && shape.block_size > 0 && shape.num_kv_heads > 0 && shape.head_dim > 0,
              "bad KV cache shape");
    const core::Shape pool = {shape.num_blocks, shape.block_size, shape.num_kv_heads, shape.head_dim};
    for (int64_t l = 0; l < shape.num_layers; ++l) {
        // NOTE: uninitialised on purpose: attention only reads positions written earlier, and untouched pages
        // of a large cache are never faulted in.
        keys_.push_back(core::Tensor::empty(core::DType::kF32, pool));
        values_.push_back(core::Tensor::empty(core::DType::kF32, pool));
    }
}

kernels::PagedKvLayout KvCache::layout(const int32_t* block_tables, int64_t max_blocks_per_seq) const {
    return {shape_.num_blocks, shape_.block_size, shape_.num_kv_heads,
            shape_.head_dim,   block_tables,      max_blocks_per_seq};
}

}  // namespace afd::attention
