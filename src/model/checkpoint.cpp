#include "model/checkpoint.h"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>
#include <utility>

#include "core/logging.h"

namespace afd::model {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr std::string_view kIndexName = "model.safetensors.index.json";
constexpr std::string_view kSingleName = "model.safetensors";
// An index lists every tensor once (~100 bytes each); 100 MiB allows a million tensors.
constexpr size_t kMaxIndexBytes = 100u << 20;

enum class PathKind { kMissing, kDirectory, kFile, kOther };

core::Result<PathKind> pathKind(const std::string& path) {
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    if (status.type() == fs::file_type::not_found) return PathKind::kMissing;
    if (ec) return core::ioError("cannot stat {}: {}", path, ec.message());
    if (status.type() == fs::file_type::directory) return PathKind::kDirectory;
    if (status.type() == fs::file_type::regular) return PathKind::kFile;
    return PathKind::kOther;
}

// A shard name from the index must stay inside the checkpoint directory.
bool isPlainFileName(std::string_view name) {
    return !name.empty() && name.find('/') == std::string_view::npos && name.find("..") == std::string_view::npos &&
           name.find('\0') == std::string_view::npos;
}

// Reads `weight_map` of a model.safetensors.index.json: tensor name → shard file name.
core::Result<std::map<std::string, std::string>> readIndex(const std::string& index_path) {
    AFD_ASSIGN_OR_RETURN(auto mapping, core::MappedFile::open(index_path));
    if (mapping->size() > kMaxIndexBytes) {
        return core::corrupt("{}: {} bytes, larger than the {}-byte limit for an index", index_path, mapping->size(),
                             kMaxIndexBytes);
    }
    Json root;
    try {
        root = Json::parse(mapping->data(), mapping->data() + mapping->size());
    } catch (const Json::exception& e) {
        return core::corrupt("{}: not valid JSON: {}", index_path, e.what());
    }
    if (!root.is_object()) return core::corrupt("{}: must be a JSON object, got {}", index_path, root.type_name());
    const auto weight_map = root.find("weight_map");
    if (weight_map == root.end() || !weight_map->is_object()) {
        return core::corrupt("{}: 'weight_map' must be an object of tensor name → shard file name", index_path);
    }
    if (weight_map->empty()) return core::corrupt("{}: 'weight_map' names no tensors", index_path);
    std::map<std::string, std::string> result;
    for (const auto& [name, shard] : weight_map->items()) {
        if (!shard.is_string()) {
            return core::corrupt("{}: weight_map['{}'] must be a shard file name (a string), got {}", index_path, name,
                                 shard.type_name());
        }
        const auto& shard_name = shard.get_ref<const std::string&>();
        if (!isPlainFileName(shard_name)) {
            return core::corrupt(
                "{}: weight_map['{}'] = '{}' is not a plain file name inside the checkpoint "
                "directory (no '/' or '..')",
                index_path, name, shard_name);
        }
        result.emplace(name, shard_name);
    }
    return result;
}

// Which files make up the checkpoint at `path`.
struct Layout {
    std::string dir;                           // empty when `path` is one file
    std::string index_path;                    // empty when unsharded
    std::map<std::string, std::string> index;  // tensor name → shard file name
    std::set<std::string> shard_paths;
};

core::Result<Layout> resolveLayout(const std::string& path) {
    AFD_ASSIGN_OR_RETURN(const PathKind kind, pathKind(path));
    if (kind == PathKind::kMissing) return core::notFound("checkpoint {} does not exist", path);
    if (kind == PathKind::kOther) {
        return core::invalidArgument("checkpoint {} is neither a directory nor a regular file", path);
    }
    Layout layout;
    if (kind == PathKind::kFile) {
        layout.shard_paths.insert(path);
        return layout;
    }
    layout.dir = path;
    const std::string index_path = fmt::format("{}/{}", path, kIndexName);
    AFD_ASSIGN_OR_RETURN(const PathKind index_kind, pathKind(index_path));
    if (index_kind == PathKind::kFile) {
        layout.index_path = index_path;
        AFD_ASSIGN_OR_RETURN(layout.index, readIndex(index_path));
        for (const auto& [name, shard] : layout.index) {
            const std::string shard_path = fmt::format("{}/{}", path, shard);
            if (layout.shard_paths.contains(shard_path)) continue;
            AFD_ASSIGN_OR_RETURN(const PathKind shard_kind, pathKind(shard_path));
            if (shard_kind == PathKind::kMissing) {
                return core::notFound("{}: shard '{}' (holding tensor '{}') does not exist", index_path, shard, name);
            }
            layout.shard_paths.insert(shard_path);
        }
        return layout;
    }
    const std::string single = fmt::format("{}/{}", path, kSingleName);
    AFD_ASSIGN_OR_RETURN(const PathKind single_kind, pathKind(single));
    if (single_kind != PathKind::kFile) {
        return core::notFound("checkpoint directory {} holds neither {} nor {}", path, kIndexName, kSingleName);
    }
    layout.shard_paths.insert(single);
    return layout;
}

// The index and the shards' headers must agree exactly, so that no tensor is silently taken from the wrong file.
core::Status checkIndex(const Layout& layout, const std::map<std::string, TensorInfo, std::less<>>& infos) {
    for (const auto& [name, info] : infos) {
        const auto listed = layout.index.find(name);
        if (listed == layout.index.end()) {
            return core::corrupt("{}: tensor '{}' is not listed in {}", info.file, name, layout.index_path);
        }
        if (fmt::format("{}/{}", layout.dir, listed->second) != info.file) {
            return core::corrupt("{}: tensor '{}' is stored here but {} puts it in '{}'", info.file, name,
                                 layout.index_path, listed->second);
        }
    }
    for (const auto& [name, shard] : layout.index) {
        if (!infos.contains(name)) {
            return core::corrupt("{}: tensor '{}' is listed in shard '{}', which does not contain it",
                                 layout.index_path, name, shard);
        }
    }
    return core::Status::ok();
}

}  // namespace

core::Result<Checkpoint> Checkpoint::open(const std::string& path) {
    AFD_ASSIGN_OR_RETURN(const Layout layout, resolveLayout(path));
    Checkpoint checkpoint;
    checkpoint.path_ = path;
    std::vector<SafetensorsHeader> headers;
    for (const std::string& shard_path : layout.shard_paths) {
        AFD_ASSIGN_OR_RETURN(std::shared_ptr<core::MappedFile> file, core::MappedFile::open(shard_path));
        AFD_ASSIGN_OR_RETURN(SafetensorsHeader header, parseSafetensorsHeader(file->data(), file->size(), shard_path));
        checkpoint.file_bytes_ += file->size();
        checkpoint.shards_.emplace(shard_path, Shard{std::move(file), header.data_offset});
        headers.push_back(std::move(header));
    }
    // NOTE: every TensorInfo::file is its shard's path (the label given to the parser), a key of shards_.
    for (SafetensorsHeader& header : headers) {
        for (TensorInfo& info : header.tensors) {
            const auto previous = checkpoint.infos_.find(info.name);
            if (previous != checkpoint.infos_.end()) {
                return core::corrupt("tensor '{}' is stored in two shards: {} and {}", info.name, previous->second.file,
                                     info.file);
            }
            std::string name = info.name;
            checkpoint.infos_.emplace(std::move(name), std::move(info));
        }
    }
    if (!layout.index_path.empty()) AFD_RETURN_IF_ERROR(checkIndex(layout, checkpoint.infos_));
    AFD_LOG_DEBUG("checkpoint {}: {} tensors in {} shard(s), {} bytes", path, checkpoint.infos_.size(),
                  checkpoint.shards_.size(), checkpoint.file_bytes_);
    return checkpoint;
}

std::vector<std::string> Checkpoint::names() const {
    std::vector<std::string> names;
    names.reserve(infos_.size());
    for (const auto& [name, info] : infos_) names.push_back(name);
    return names;
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
    const auto it = infos_.find(name);
    return it == infos_.end() ? nullptr : &it->second;
}

core::Result<core::Tensor> Checkpoint::tensor(std::string_view name) const {
    const TensorInfo* info = find(name);
    if (info == nullptr) return core::notFound("tensor '{}' is missing from checkpoint {}", name, path_);
    const auto shard = shards_.find(info->file);
    AFD_CHECK(shard != shards_.end(), "tensor '{}' refers to shard {}, which is not open", name, info->file);
    // NOTE: parseSafetensorsHeader checked data_offset + data_end <= file size, so the view lies inside the mapping.
    const uint8_t* data = shard->second.file->data() + shard->second.data_offset + info->data_begin;
    return core::Tensor::wrap(const_cast<uint8_t*>(data), info->dtype, info->shape, core::Device::cpu(),
                              shard->second.file);
}

core::Result<core::Tensor> Checkpoint::expect(std::string_view name, core::DType dtype,
                                              const core::Shape& shape) const {
    const TensorInfo* info = find(name);
    if (info == nullptr) {
        return core::notFound("tensor '{}' is missing from checkpoint {} (expected {} {})", name, path_,
                              core::dtypeName(dtype), core::shapeToString(shape));
    }
    if (info->dtype != dtype || info->shape != shape) {
        return core::mismatch("{}: tensor '{}' is {} {}, expected {} {}", info->file, name,
                              core::dtypeName(info->dtype), core::shapeToString(info->shape), core::dtypeName(dtype),
                              core::shapeToString(shape));
    }
    return tensor(name);
}

std::vector<std::string> Checkpoint::files() const {
    std::vector<std::string> files;
    files.reserve(shards_.size());
    for (const auto& [file, shard] : shards_) files.push_back(file);
    return files;
}

}  // namespace afd::model
