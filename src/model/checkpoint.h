// Read access to a safetensors checkpoint: one `*.safetensors` file, or a directory holding either
// `model.safetensors` or the sharded form (`model.safetensors.index.json` naming one shard per tensor).
//
// Every header is validated when opened (safetensors_format.h); tensors are zero-copy views into the read-only
// mappings, which stay alive as long as the Checkpoint or any Tensor obtained from it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/safetensors_format.h"

namespace afd::model {

class Checkpoint {
public:
    // `path`: a directory (model.safetensors.index.json, else model.safetensors) or one .safetensors file.
    // The index's `weight_map` (tensor name → shard file name) must name plain file names inside the directory and
    // agree exactly with the shards' headers: every tensor it names is in its shard, every tensor of a shard is in
    // the index, no tensor is in two shards. Errors name the file and, where one is at fault, the tensor: kNotFound
    // for a missing path or shard, kCorrupt for a malformed header or index, kIoError when the OS refuses.
    static core::Result<Checkpoint> open(const std::string& path);

    const std::string& path() const { return path_; }
    std::vector<std::string> names() const;
    size_t numTensors() const { return infos_.size(); }
    bool contains(std::string_view name) const { return find(name) != nullptr; }
    const TensorInfo* find(std::string_view name) const;

    // A zero-copy view of the tensor's bytes (CPU, read-only memory: do not write through it); it keeps the shard's
    // mapping alive. NOTE: the view is aligned to its element size only when the shard's data section is (every
    // HF writer and safetensors_writer.h pad the header to a multiple of 8 bytes).
    core::Result<core::Tensor> tensor(std::string_view name) const;
    // As tensor(), and checks dtype and shape; the error (kNotFound when missing, kMismatch otherwise) names the
    // tensor, the expected and the actual values.
    core::Result<core::Tensor> expect(std::string_view name, core::DType dtype, const core::Shape& shape) const;

    // Sum of the shard files' sizes in bytes.
    uint64_t fileBytes() const { return file_bytes_; }
    // The shard files, in name order.
    std::vector<std::string> files() const;

private:
    struct Shard {
        std::shared_ptr<core::MappedFile> file;  // the whole shard, mapped read-only
        uint64_t data_offset = 0;                // where its data section starts
    };

    std::string path_;
    std::map<std::string, TensorInfo, std::less<>> infos_;
    std::map<std::string, Shard, std::less<>> shards_;  // by file path; each file mapped once
    uint64_t file_bytes_ = 0;
};

}  // namespace afd::model
