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
#include "core/status.h"
#include "core/tensor.h"

namespace afd::model {

struct TensorInfo {
    std::string name;
    core::DType dtype = core::DType::kBf16;
    core::Shape shape;
    std::string file;             // path of the shard that holds it
    uint64_t data_begin = 0;      // byte range inside that shard's data section
    uint64_t data_end = 0;
};

class Checkpoint {
public:
    // `path`: a directory (model.safetensors or model.safetensors.index.json) or one .safetensors file.
    // Errors name the file and, where one is at fault, the tensor.
    static core::Result<Checkpoint> open(const std::string& path);

    const std::string& path() const { return path_; }
    std::vector<std::string> names() const;
    size_t numTensors() const { return infos_.size(); }
    bool contains(std::string_view name) const { return find(name) != nullptr; }
    const TensorInfo* find(std::string_view name) const;

    // A view of the tensor's bytes (CPU, read-only memory: do not write through it).
    core::Result<core::Tensor> tensor(std::string_view name) const;
    // As tensor(), and checks dtype and shape; the error names the tensor, the expected and the actual values.
    core::Result<core::Tensor> expect(std::string_view name, core::DType dtype, const core::Shape& shape) const;

    // Sum of the shard files' sizes in bytes.
    uint64_t fileBytes() const { return file_bytes_; }
    // The shard files, in name order.
    std::vector<std::string> files() const;

private:
    struct Shard;
    std::string path_;
    std::map<std::string, TensorInfo, std::less<>> infos_;
    std::map<std::string, std::shared_ptr<Shard>> shards_;  // by file path
    uint64_t file_bytes_ = 0;
};

}  // namespace afd::model
