// A streaming writer of safetensors checkpoints in the Hugging Face layout, for models too large to hold in memory
// (`afd gen-model` writes tens of GB): tensors are produced one at a time by a callback into one reused buffer.
//
// Layout written into `dir` (created if missing):
//   one shard:  model.safetensors
//   N shards:   model-00001-of-0000N.safetensors … and model.safetensors.index.json
//               ({"metadata": {"total_size": <sum of tensor bytes>}, "weight_map": {name: shard file}})
// which is what Checkpoint::open and transformers' from_pretrained read. The file of the other layout
// (model.safetensors.index.json after a one-shard write, model.safetensors after a sharded one) is removed, so
// that no reader picks up a stale model; other files in `dir` are left alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"

namespace afd::model {

struct TensorPlan {
    std::string name;
    core::DType dtype = core::DType::kBf16;
    core::Shape shape;
};

struct CheckpointWriteOptions {
    // Shards are filled greedily in plan order; a shard closes before the tensor that would take it past this
    // size (counting tensor bytes only). A tensor larger than the limit gets a shard of its own.
    uint64_t max_shard_bytes = 4ull << 30;
    // Written as every shard's "__metadata__".
    std::map<std::string, std::string> metadata = {{"format", "pt"}};
};

// fill(plan, out, nbytes) writes the tensor's nbytes bytes (row-major, little-endian elements) into `out`. It is
// called once per tensor, in plan order, on the calling thread, with one buffer reused between calls (memory
// stays about the largest tensor). A non-ok Status from it stops the write and is returned with the file named.
using TensorFill = std::function<core::Status(const TensorPlan& plan, uint8_t* out, size_t nbytes)>;

// Writes the tensors of `plans` (at least one; names unique, non-empty, valid UTF-8 and not "__metadata__";
// dimensions non-negative) into `dir`. Each header is padded with spaces to a multiple of 8 bytes, so each data
// section starts 8-byte aligned; tensors follow each other in plan order without gaps, as the format requires. Each
// file is written under a temporary name, flushed to disk and renamed when complete; on error the temporary is removed
// and files already completed stay. Errors name the file or the plan at fault.
core::Status writeCheckpoint(const std::string& dir, const std::vector<TensorPlan>& plans,
                             const CheckpointWriteOptions& options, const TensorFill& fill);

}  // namespace afd::model
