#include "attention/kv_cache.h"

#include "core/check.h"

namespace afd::attention {

uint64_t KvCacheShape::bytes() const {
    return 2ull * static_cast<uint64_t>(num_layers * num_blocks * block_size * num_kv_heads * head_dim) *
           core::dtypeSize(dtype);
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

KvCache::KvCache(const KvCacheShape& shape, DeviceOps& ops) : shape_(shape), allocator_(shape.num_blocks) {
    AFD_CHECK(shape.num_layers > 0 && shape.block_size > 0 && shape.num_kv_heads > 0 && shape.head_dim > 0,
              "bad KV cache shape");
    AFD_CHECK(shape.dtype == ops.activationDType(), "a {} KV cache on {}, whose activations are {}",
              core::dtypeName(shape.dtype), ops.device().toString(), core::dtypeName(ops.activationDType()));
    const core::Shape pool = {shape.num_blocks, shape.block_size, shape.num_kv_heads, shape.head_dim};
    for (int64_t l = 0; l < shape.num_layers; ++l) {
        // NOTE: uninitialised on purpose: attention only reads positions written earlier, and untouched pages
        // of a large host cache are never faulted in.
        keys_.push_back(ops.empty(shape.dtype, pool));
        values_.push_back(ops.empty(shape.dtype, pool));
    }
}

}  // namespace afd::attention
