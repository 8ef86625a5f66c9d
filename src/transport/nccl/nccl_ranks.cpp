#include "transport/nccl/nccl_ranks.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdint>
#include <cstring>
#include <fstream>

#include "core/check.h"
#include "transport/rendezvous.h"

namespace afd::transport::nccl {
namespace {

constexpr uint32_t kUniqueIdMagic = 0x44494e41;  // "ANID"
constexpr size_t kUniqueIdPrefixBytes = 8;       // magic, count

template <typename T>
void put(std::string& out, T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

template <typename T>
T get(std::string_view in, size_t at) {
    T v;
    std::memcpy(&v, in.data() + at, sizeof(T));
    return v;
}

bool isHex(std::string_view s) {
    for (const char c : s) {
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    }
    return true;
}

bool isPrintableToken(std::string_view s) {
    for (const char c : s) {
        if (c <= ' ' || c > '~') return false;
    }
    return !s.empty();
}

}  // namespace

int globalRank(Role role, int rank, int num_attention_ranks, int num_ffn_ranks) {
    const int count = role == Role::kAttention ? num_attention_ranks : num_ffn_ranks;
    AFD_CHECK(rank >= 0 && rank < count, "{} rank {} outside [0, {})", roleName(role), rank, count);
    return role == Role::kFfn ? rank : num_ffn_ranks + rank;
}

int worldSize(int num_attention_ranks, int num_ffn_ranks) { return num_attention_ranks + num_ffn_ranks; }

std::string encodeUniqueIds(std::span<const std::string> ids) {
    std::string out;
    put<uint32_t>(out, kUniqueIdMagic);
    put<uint32_t>(out, static_cast<uint32_t>(ids.size()));
    for (const std::string& id : ids) {
        AFD_CHECK(id.size() == kUniqueIdBytes, "an NCCL unique id of {} bytes", id.size());
        out += id;
    }
    return out;
}

core::Result<std::vector<std::string>> decodeUniqueIds(std::string_view blob, size_t count, std::string_view source) {
    if (blob.size() < kUniqueIdPrefixBytes || get<uint32_t>(blob, 0) != kUniqueIdMagic) {
        return core::corrupt("{}: its '{}' record ({} bytes) is not an nccl unique-id record", source, kUniqueIdBlob,
                             blob.size());
    }
    const uint32_t got = get<uint32_t>(blob, 4);
    if (got != count || blob.size() != kUniqueIdPrefixBytes + count * kUniqueIdBytes) {
        return core::corrupt("{}: its '{}' record holds {} ids in {} bytes, this rank expects {} ({} bytes)", source,
                             kUniqueIdBlob, got, blob.size(), count, kUniqueIdPrefixBytes + count * kUniqueIdBytes);
    }
    std::vector<std::string> ids;
    for (size_t i = 0; i < count; ++i) {
        ids.emplace_back(blob.substr(kUniqueIdPrefixBytes + i * kUniqueIdBytes, kUniqueIdBytes));
    }
    return ids;
}

std::string hostBootId() {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string id;
    std::getline(in, id);
    return isPrintableToken(id) ? id : std::string("unknown");
}

std::string ncclHostKey(const char* nccl_hostid, const std::string& boot_id) {
    if (nccl_hostid == nullptr || nccl_hostid[0] == '\0') return boot_id;
    std::string key = "hostid-";
    for (const char* c = nccl_hostid; *c != '\0'; ++c) key += fmt::format("{:02x}", static_cast<unsigned char>(*c));
    return key;
}

std::string uuidHex(std::span<const unsigned char> bytes) {
    std::string out;
    for (const unsigned char b : bytes) out += fmt::format("{:02x}", b);
    return out;
}

std::string encodeGpuIdentity(const GpuIdentity& gpu) {
    return fmt::format("boot={} uuid={} device={} host={}", gpu.boot_id, gpu.uuid, gpu.device, gpu.host);
}

core::Result<GpuIdentity> decodeGpuIdentity(std::string_view blob, std::string_view source) {
    const auto bad = [&](std::string_view why) {
        return core::corrupt("{}: its '{}' record \"{}\" {}", source, kGpuBlob, blob.substr(0, 200), why);
    };
    GpuIdentity gpu;
    bool have_boot = false, have_uuid = false, have_device = false, have_host = false;
    size_t at = 0;
    while (at < blob.size()) {
        size_t end = blob.find(' ', at);
        if (end == std::string_view::npos) end = blob.size();
        const std::string_view field = blob.substr(at, end - at);
        at = end + 1;
        const size_t eq = field.find('=');
        if (eq == std::string_view::npos) return bad("has a field without '='");
        const std::string_view key = field.substr(0, eq);
        const std::string_view value = field.substr(eq + 1);
        if (!isPrintableToken(value)) return bad(fmt::format("has an empty or unprintable {}", key));
        if (key == "boot" && !have_boot) {
            gpu.boot_id = value;
            have_boot = true;
        } else if (key == "uuid" && !have_uuid) {
            if (value.size() != 32 || !isHex(value)) return bad("has a uuid that is not 32 lowercase hex digits");
            gpu.uuid = value;
            have_uuid = true;
        } else if (key == "device" && !have_device) {
            const auto [end_ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), gpu.device);
            if (ec != std::errc() || end_ptr != value.data() + value.size() || gpu.device < 0) {
                return bad("has a device that is not a CUDA device index");
            }
            have_device = true;
        } else if (key == "host" && !have_host) {
            gpu.host = value;
            have_host = true;
        } else {
            return bad(fmt::format("has an unknown or repeated field '{}'", key));
        }
    }
    if (!(have_boot && have_uuid && have_device && have_host)) return bad("lacks one of boot, uuid, device, host");
    return gpu;
}

core::Status checkNoSharedGpu(std::span<const RankGpu> ranks) {
    for (size_t i = 0; i < ranks.size(); ++i) {
        for (size_t j = i + 1; j < ranks.size(); ++j) {
            const GpuIdentity& a = ranks[i].gpu;
            const GpuIdentity& b = ranks[j].gpu;
            if (a.boot_id != b.boot_id || a.uuid != b.uuid) continue;
            return core::invalidArgument(
                "afd.connector \"nccl\": {} and {} both run on GPU {} of host {} (cuda:{} and cuda:{}), but the ranks "
                "of one NCCL communicator need a GPU each; give each rank its own GPU, or use afd.connector "
                "\"cuda_ipc\", which serves ranks that share a GPU",
                describeRank(ranks[i].role, ranks[i].rank), describeRank(ranks[j].role, ranks[j].rank), a.uuid, a.host,
                a.device, b.device);
        }
    }
    return core::Status::ok();
}

}  // namespace afd::transport::nccl
