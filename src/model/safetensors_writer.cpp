#include "model/safetensors_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <system_error>
#include <utility>

#include "core/check.h"
#include "core/logging.h"
#include "core/unique_fd.h"

namespace afd::model {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kIndexName = "model.safetensors.index.json";
constexpr std::string_view kSingleName = "model.safetensors";
constexpr size_t kMaxShards = 99999;  // the five digits of "model-00001-of-00002.safetensors"
constexpr uint64_t kMaxInt63 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
constexpr size_t kMaxWriteChunk = size_t{1} << 30;

struct Shard {
    size_t first = 0;  // plans [first, last)
    size_t last = 0;
    std::string file_name;
};

// Bytes of each plan; rejects what the reader would reject.
core::Result<std::vector<uint64_t>> validatePlans(const std::vector<TensorPlan>& plans,
                                                  const CheckpointWriteOptions& options) {
    if (options.max_shard_bytes == 0) return core::invalidArgument("max_shard_bytes must be positive");
    if (plans.empty()) return core::invalidArgument("no tensors to write");
    std::vector<uint64_t> sizes;
    sizes.reserve(plans.size());
    std::set<std::string_view> names;
    uint64_t total = 0;
    for (size_t i = 0; i < plans.size(); ++i) {
        const TensorPlan& plan = plans[i];
        if (plan.name.empty()) return core::invalidArgument("tensor plan #{} has an empty name", i);
        if (plan.name == "__metadata__") {
            return core::invalidArgument("tensor plan #{}: '__metadata__' is reserved by the format", i);
        }
        if (!names.insert(plan.name).second) {
            return core::invalidArgument("tensor '{}' is planned more than once (again at plan #{})", plan.name, i);
        }
        // As the reader counts: the product of the non-zero dimensions times the element size fits in 63 bits.
        uint64_t nonzero_bytes = core::dtypeSize(plan.dtype);
        bool has_zero = false;
        for (int64_t d : plan.shape) {
            if (d < 0) {
                return core::invalidArgument("tensor '{}': shape {} has a negative dimension", plan.name,
                                             core::shapeToString(plan.shape));
            }
            if (d == 0) {
                has_zero = true;
            } else if (__builtin_mul_overflow(nonzero_bytes, static_cast<uint64_t>(d), &nonzero_bytes) ||
                       nonzero_bytes > kMaxInt63) {
                return core::invalidArgument("tensor '{}': shape {} of {} needs more than 2^63 bytes", plan.name,
                                             core::shapeToString(plan.shape), core::dtypeName(plan.dtype));
            }
        }
        const uint64_t bytes = has_zero ? 0 : nonzero_bytes;
        if (__builtin_add_overflow(total, bytes, &total) || total > kMaxInt63) {
            return core::invalidArgument("the plans add up to more than 2^63 bytes (at tensor '{}')", plan.name);
        }
        sizes.push_back(bytes);
    }
    return sizes;
}

// Greedy in plan order: a shard closes before the tensor that would take it past max_shard_bytes.
core::Result<std::vector<Shard>> planShards(const std::vector<uint64_t>& sizes, uint64_t max_shard_bytes) {
    std::vector<Shard> shards;
    uint64_t shard_bytes = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
        // NOTE: no overflow: shard_bytes <= max(max_shard_bytes, one tensor) and each tensor is < 2^63 bytes.
        if (shards.empty() || (shard_bytes > 0 && shard_bytes + sizes[i] > max_shard_bytes)) {
            shards.push_back(Shard{i, i, {}});
            shard_bytes = 0;
        }
        shards.back().last = i + 1;
        shard_bytes += sizes[i];
    }
    if (shards.size() > kMaxShards) {
        return core::invalidArgument("{} shards needed at max_shard_bytes={}; the file names allow at most {}",
                                     shards.size(), max_shard_bytes, kMaxShards);
    }
    for (size_t s = 0; s < shards.size(); ++s) {
        shards[s].file_name = shards.size() == 1
                                  ? std::string(kSingleName)
                                  : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
    }
    return shards;
}

// The JSON header of one shard, padded with spaces so that 8 + its length is a multiple of 8. Entries are in plan
// order (assembled as text: an ordered JSON object would cost quadratic time in the number of tensors).
core::Result<std::string> shardHeader(const std::vector<TensorPlan>& plans, const std::vector<uint64_t>& sizes,
                                      const Shard& shard, const std::map<std::string, std::string>& metadata) {
    std::string text = "{";
    try {
        if (!metadata.empty()) text += fmt::format("\"__metadata__\":{}", nlohmann::json(metadata).dump());
        uint64_t offset = 0;
        for (size_t i = shard.first; i < shard.last; ++i) {
            if (text.size() > 1) text += ',';
            fmt::format_to(std::back_inserter(text), "{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                           nlohmann::json(plans[i].name).dump(), core::dtypeName(plans[i].dtype),
                           fmt::join(plans[i].shape, ","), offset, offset + sizes[i]);
            offset += sizes[i];
        }
    } catch (const nlohmann::json::exception& e) {
        return core::invalidArgument("{}: tensor names and metadata must be valid UTF-8: {}", shard.file_name,
                                     e.what());
    }
    text += '}';
    text.append((8 - text.size() % 8) % 8, ' ');
    return text;
}

// A file written under `<path>.tmp` and renamed to `path` by commit(); removed if never committed.
class PendingFile {
public:
    static core::Result<PendingFile> create(std::string path) {
        std::string temp = path + ".tmp";
        core::UniqueFd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
        if (!fd.valid()) return core::ioError("cannot create {}: {}", temp, std::strerror(errno));
        return PendingFile(std::move(path), std::move(temp), std::move(fd));
    }

    PendingFile(PendingFile&& other) noexcept
        : path_(std::move(other.path_)),
          temp_(std::move(other.temp_)),
          fd_(std::move(other.fd_)),
          armed_(std::exchange(other.armed_, false)) {}
    PendingFile& operator=(PendingFile&&) = delete;
    ~PendingFile() {
        if (armed_) ::unlink(temp_.c_str());
    }

    const std::string& path() const { return path_; }

    core::Status write(const uint8_t* data, size_t size) {
        while (size > 0) {
            const ssize_t written = ::write(fd_.get(), data, std::min(size, kMaxWriteChunk));
            if (written < 0) {
                if (errno == EINTR) continue;
                return core::ioError("cannot write {}: {}", temp_, std::strerror(errno));
            }
            data += written;
            size -= static_cast<size_t>(written);
        }
        return core::Status::ok();
    }

    core::Status commit() {
        if (::fsync(fd_.get()) != 0) return core::ioError("cannot flush {}: {}", temp_, std::strerror(errno));
        if (::close(fd_.release()) != 0) return core::ioError("cannot close {}: {}", temp_, std::strerror(errno));
        if (::rename(temp_.c_str(), path_.c_str()) != 0) {
            return core::ioError("cannot rename {} to {}: {}", temp_, path_, std::strerror(errno));
        }
        armed_ = false;
        return core::Status::ok();
    }

private:
    PendingFile(std::string path, std::string temp, core::UniqueFd fd)
        : path_(std::move(path)), temp_(std::move(temp)), fd_(std::move(fd)) {}

    std::string path_;
    std::string temp_;
    core::UniqueFd fd_;
    bool armed_ = true;
};

// Grows to the largest tensor and is reused: memory stays about one tensor however large the model.
class FillBuffer {
public:
    uint8_t* reserve(size_t size) {
        if (size > capacity_) {
            data_ = std::make_unique_for_overwrite<uint8_t[]>(size);
            capacity_ = size;
        }
        return data_.get();
    }

private:
    std::unique_ptr<uint8_t[]> data_;
    size_t capacity_ = 0;
};

core::Status writeShard(const std::string& dir, const std::vector<TensorPlan>& plans,
                        const std::vector<uint64_t>& sizes, const Shard& shard, const CheckpointWriteOptions& options,
                        const TensorFill& fill, FillBuffer* buffer) {
    AFD_ASSIGN_OR_RETURN(const std::string header, shardHeader(plans, sizes, shard, options.metadata));
    AFD_ASSIGN_OR_RETURN(PendingFile file, PendingFile::create(fmt::format("{}/{}", dir, shard.file_name)));
    uint8_t length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
    AFD_RETURN_IF_ERROR(file.write(length, sizeof(length)));
    AFD_RETURN_IF_ERROR(file.write(reinterpret_cast<const uint8_t*>(header.data()), header.size()));
    for (size_t i = shard.first; i < shard.last; ++i) {
        const size_t nbytes = static_cast<size_t>(sizes[i]);
        uint8_t* out = buffer->reserve(nbytes);
        const core::Status filled = fill(plans[i], out, nbytes);
        if (!filled.isOk()) return filled.withContext(fmt::format("{}: tensor '{}'", file.path(), plans[i].name));
        AFD_RETURN_IF_ERROR(file.write(out, nbytes));
    }
    return file.commit();
}

core::Status writeIndex(const std::string& dir, const std::vector<TensorPlan>& plans,
                        const std::vector<uint64_t>& sizes, const std::vector<Shard>& shards) {
    nlohmann::json weight_map = nlohmann::json::object();
    uint64_t total = 0;
    for (const Shard& shard : shards) {
        for (size_t i = shard.first; i < shard.last; ++i) {
            weight_map[plans[i].name] = shard.file_name;
            total += sizes[i];
        }
    }
    const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", std::move(weight_map)}};
    // NOTE: names were dumped once already by shardHeader, so they are valid UTF-8 and dump() cannot throw.
    const std::string text = index.dump(2) + "\n";
    AFD_ASSIGN_OR_RETURN(PendingFile file, PendingFile::create(fmt::format("{}/{}", dir, kIndexName)));
    AFD_RETURN_IF_ERROR(file.write(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
    return file.commit();
}

core::Status removeIfPresent(const std::string& path) {
    std::error_code ec;
    fs::remove(path, ec);
    if (ec) return core::ioError("cannot remove stale {}: {}", path, ec.message());
    return core::Status::ok();
}

}  // namespace

core::Status writeCheckpoint(const std::string& dir, const std::vector<TensorPlan>& plans,
                             const CheckpointWriteOptions& options, const TensorFill& fill) {
    AFD_CHECK(fill != nullptr, "writeCheckpoint({}) needs a fill function", dir);
    AFD_ASSIGN_OR_RETURN(const std::vector<uint64_t> sizes, validatePlans(plans, options));
    AFD_ASSIGN_OR_RETURN(const std::vector<Shard> shards, planShards(sizes, options.max_shard_bytes));
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return core::ioError("cannot create directory {}: {}", dir, ec.message());

    FillBuffer buffer;
    for (const Shard& shard : shards) {
        AFD_RETURN_IF_ERROR(writeShard(dir, plans, sizes, shard, options, fill, &buffer));
    }
    if (shards.size() == 1) {
        AFD_RETURN_IF_ERROR(removeIfPresent(fmt::format("{}/{}", dir, kIndexName)));
    } else {
        AFD_RETURN_IF_ERROR(writeIndex(dir, plans, sizes, shards));
        AFD_RETURN_IF_ERROR(removeIfPresent(fmt::format("{}/{}", dir, kSingleName)));
    }
    uint64_t total = 0;
    for (uint64_t size : sizes) total += size;
    AFD_LOG_INFO("wrote checkpoint {}: {} tensors, {} bytes in {} shard(s)", dir, plans.size(), total, shards.size());
    return core::Status::ok();
}

}  // namespace afd::model
