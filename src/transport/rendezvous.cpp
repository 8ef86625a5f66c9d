#include "transport/rendezvous.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>

#include "core/logging.h"

namespace afd::transport {
namespace {

using std::chrono::milliseconds;

std::string recordKey(Role role, int rank) { return fmt::format("afd/rank/{}/{}", roleName(role), rank); }
std::string seenKey(Role role, int rank) { return fmt::format("afd/seen/{}/{}", roleName(role), rank); }
std::string blobKey(Role role, int rank, std::string_view key) {
    return fmt::format("afd/blob/{}/{}/{}", roleName(role), rank, key);
}

bool isBlobKeyChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.' || c == '/';
}

std::string encodeRecord(const RankRecord& record) {
    nlohmann::json j = {{"role", roleName(record.role)},
                        {"rank", record.rank},
                        {"protocol_version", record.protocol_version},
                        {"fingerprint", record.fingerprint}};
    return j.dump();
}

core::Result<RankRecord> decodeRecord(const std::string& text, Role role, int rank, std::string_view where) {
    const std::string key = recordKey(role, rank);
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return core::corrupt("{}: record '{}' is not a JSON object", where, key);
    const auto field = [&](const char* name) -> const nlohmann::json* {
        auto it = j.find(name);
        return it == j.end() ? nullptr : &*it;
    };
    const nlohmann::json* role_field = field("role");
    const nlohmann::json* rank_field = field("rank");
    const nlohmann::json* version = field("protocol_version");
    const nlohmann::json* fingerprint = field("fingerprint");
    if (!role_field || !role_field->is_string() || !rank_field || !rank_field->is_number_integer() || !version ||
        !version->is_number_unsigned() || !fingerprint || !fingerprint->is_string()) {
        return core::corrupt("{}: record '{}' lacks role, rank, protocol_version or fingerprint: {}", where, key, text);
    }
    if (parseRole(role_field->get<std::string>()) != role || rank_field->get<int64_t>() != rank) {
        return core::corrupt("{}: record '{}' names {} rank {}", where, key, role_field->get<std::string>(),
                             rank_field->get<int64_t>());
    }
    RankRecord record;
    record.role = role;
    record.rank = rank;
    record.protocol_version = static_cast<uint32_t>(version->get<uint64_t>());
    record.fingerprint = fingerprint->get<std::string>();
    return record;
}

// Compares every registered rank with `self`; returns all differences in one message, or ok.
core::Status comparePeers(const RankRecord& self, const std::vector<RankRecord>& all, std::string_view where) {
    const std::string me = describeRank(self.role, self.rank) + " (this rank)";
    std::vector<std::string> problems;
    for (const RankRecord& peer : all) {
        if (peer.role == self.role && peer.rank == self.rank) continue;
        const std::string them = describeRank(peer.role, peer.rank);
        if (peer.protocol_version != self.protocol_version) {
            problems.push_back(fmt::format("protocol version mismatch: {} speaks version {}, {} speaks version {}",
                                           them, peer.protocol_version, me, self.protocol_version));
        } else if (peer.fingerprint != self.fingerprint) {
            problems.push_back(fmt::format("fingerprint mismatch: {} has '{}', {} has '{}'", them, peer.fingerprint, me,
                                           self.fingerprint));
        }
    }
    if (problems.empty()) return core::Status::ok();
    return core::mismatch("{}: {}", where, fmt::join(problems, "; "));
}

}  // namespace

std::string describeRank(Role role, int rank) { return fmt::format("{} rank {}", roleName(role), rank); }

core::Status checkBlobKey(std::string_view key) {
    if (key.empty() || key.size() > kMaxBlobKeyBytes) {
        return core::invalidArgument("rendezvous blob key '{}' must have 1..{} bytes, has {}", key, kMaxBlobKeyBytes,
                                     key.size());
    }
    if (!std::all_of(key.begin(), key.end(), isBlobKeyChar)) {
        return core::invalidArgument("rendezvous blob key '{}' may hold only letters, digits and '_-./'", key);
    }
    return core::Status::ok();
}

Rendezvous::~Rendezvous() = default;

core::Status Rendezvous::publishBlob(std::string_view key, std::string_view value, std::string_view where) {
    const std::string self_name = describeRank(self_.role, self_.rank);
    AFD_RETURN_IF_ERROR(checkBlobKey(key));
    if (value.size() > kMaxBlobValueBytes) {
        return core::invalidArgument("{}: blob '{}' of {} has {} bytes, more than the {} a blob may hold", where, key,
                                     self_name, value.size(), kMaxBlobValueBytes);
    }
    if (published_.contains(key)) {
        return core::invalidArgument("{}: {} published blob '{}' already (each key is published once)", where,
                                     self_name, key);
    }
    if (published_.size() >= kMaxBlobsPerRank) {
        return core::invalidArgument("{}: {} may publish at most {} blobs; '{}' is one more", where, self_name,
                                     kMaxBlobsPerRank, key);
    }
    AFD_ASSIGN_OR_RETURN(std::optional<std::string> present,
                         client_->setIfAbsent(blobKey(self_.role, self_.rank, key), value));
    if (present) {
        return core::mismatch("{}: blob '{}' of {} is published already; two processes claim the same rank", where, key,
                              self_name);
    }
    published_.emplace(key);
    return core::Status::ok();
}

core::Status Rendezvous::publish(std::string_view key, std::string_view value) {
    return publishBlob(key, value, fmt::format("rendezvous at {}", store_address_));
}

core::Result<std::string> Rendezvous::fetch(Role role, int rank, std::string_view key, milliseconds timeout) {
    const std::string where = fmt::format("rendezvous at {}", store_address_);
    AFD_RETURN_IF_ERROR(checkBlobKey(key));
    const int count = role == Role::kAttention ? num_attention_ranks_ : num_ffn_ranks_;
    if (rank < 0 || rank >= count) {
        return core::invalidArgument("{}: no {} rank {} (the deployment has {})", where, roleName(role), rank, count);
    }
    core::Result<std::string> value = client_->get(blobKey(role, rank, key), timeout);
    if (value.isOk()) return value;
    if (value.status().code() == core::StatusCode::kTimeout) {
        return core::timeoutError("{}: {} did not publish '{}' within {}", where, describeRank(role, rank), key,
                                  formatDuration(timeout));
    }
    return value.status().withContext(where);
}

core::Result<std::unique_ptr<Rendezvous>> Rendezvous::join(const RendezvousOptions& options, RankRecord self,
                                                           std::vector<RendezvousBlob> blobs) {
    const std::string where = fmt::format("rendezvous at {}", options.store.toString());
    for (const RendezvousBlob& blob : blobs) AFD_RETURN_IF_ERROR(checkBlobKey(blob.key));
    const Clock::time_point start = Clock::now();
    const Deadline deadline = deadlineAfter(options.timeout);
    std::unique_ptr<Rendezvous> rv(new Rendezvous());
    rv->store_address_ = options.store.toString();
    rv->num_attention_ranks_ = options.num_attention_ranks;
    rv->num_ffn_ranks_ = options.num_ffn_ranks;
    rv->self_ = self;
    if (options.host_store) {
        AFD_ASSIGN_OR_RETURN(rv->server_, StoreServer::start(options.store.host, options.store.port));
    }
    {
        core::Result<std::unique_ptr<StoreClient>> client =
            StoreClient::connect(options.store, deadline, options.cancel);
        if (!client.isOk()) return client.status().withContext(where);
        rv->client_ = std::move(*client);
    }
    StoreClient& store = *rv->client_;
    const std::string self_name = describeRank(self.role, self.rank);
    // Blobs before the record: a peer that has read the record finds them.
    for (const RendezvousBlob& blob : blobs) AFD_RETURN_IF_ERROR(rv->publishBlob(blob.key, blob.value, where));
    AFD_ASSIGN_OR_RETURN(std::optional<std::string> present,
                         store.setIfAbsent(recordKey(self.role, self.rank), encodeRecord(self)));
    if (present) {
        return core::mismatch("{}: {} is registered already (record {}); two processes claim the same rank", where,
                              self_name, *present);
    }
    AFD_LOG_INFO("{}: registered as {}, waiting for {} attention and {} ffn ranks", where, self_name,
                 options.num_attention_ranks, options.num_ffn_ranks);

    // Wait for every rank, FFN ranks first; after the deadline, list everyone still missing.
    std::vector<std::pair<Role, int>> expected;
    for (int r = 0; r < options.num_ffn_ranks; ++r) expected.emplace_back(Role::kFfn, r);
    for (int r = 0; r < options.num_attention_ranks; ++r) expected.emplace_back(Role::kAttention, r);
    std::vector<RankRecord> all;
    std::vector<std::string> missing;
    for (const auto& [role, rank] : expected) {
        const milliseconds wait = missing.empty() ? timeLeft(deadline) : milliseconds(0);
        core::Result<std::string> text = store.get(recordKey(role, rank), wait);
        if (!text.isOk()) {
            if (text.status().code() != core::StatusCode::kTimeout) return text.status().withContext(where);
            missing.push_back(describeRank(role, rank));
            continue;
        }
        AFD_ASSIGN_OR_RETURN(RankRecord record, decodeRecord(*text, role, rank, where));
        all.push_back(std::move(record));
    }
    if (!missing.empty()) {
        return core::timeoutError("{} timed out after {}: {} never registered", where,
                                  formatDuration(std::chrono::duration_cast<milliseconds>(Clock::now() - start)),
                                  fmt::join(missing, ", "));
    }
    AFD_RETURN_IF_ERROR(store.set(seenKey(self.role, self.rank), "1"));

    const core::Status compared = comparePeers(self, all, where);
    if (options.host_store) {
        // Serve until everyone has read the records, so that each rank sees the same mismatches as this one.
        for (const auto& [role, rank] : expected) {
            core::Result<std::string> seen = store.get(seenKey(role, rank), timeLeft(deadline));
            if (!seen.isOk()) {
                AFD_LOG_WARN("{}: {} did not confirm reading the records: {}", where, describeRank(role, rank),
                             seen.status().message());
                break;
            }
        }
    }
    AFD_RETURN_IF_ERROR(compared);

    for (RankRecord& record : all) {
        (record.role == Role::kAttention ? rv->attention_ : rv->ffn_).push_back(std::move(record));
    }
    AFD_LOG_INFO("{}: all {} ranks registered", where, rv->attention_.size() + rv->ffn_.size());
    return rv;
}

}  // namespace afd::transport
