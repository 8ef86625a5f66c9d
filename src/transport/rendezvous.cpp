#include "transport/rendezvous.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/logging.h"

namespace afd::transport {
namespace {

using std::chrono::milliseconds;

// How often an idle rank looks whether the session it waits in is still the open one.
constexpr milliseconds kIdleCheckInterval(1000);

// The wait of one store get within the slice that ends at `end` (kNoDeadline: the longest the store waits).
milliseconds sliceWait(Deadline end) { return end == kNoDeadline ? milliseconds(kMaxStoreWaitMs) : timeLeft(end); }

// Runs `f` when it goes out of scope.
template <typename F>
class OnExit {
public:
    explicit OnExit(F f) : f_(std::move(f)) {}
    ~OnExit() { f_(); }
    OnExit(const OnExit&) = delete;
    OnExit& operator=(const OnExit&) = delete;

private:
    F f_;
};

bool isBlobKeyChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.' || c == '/';
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

using RankId = std::pair<Role, int>;

// "ffn ranks 0, 1 (of 2) and attention rank 1 (of 3)": `ranks` grouped by role, FFN ranks first.
std::string describeAwaited(const std::vector<RankId>& ranks, int num_attention_ranks, int num_ffn_ranks) {
    std::vector<std::string> parts;
    for (const Role role : {Role::kFfn, Role::kAttention}) {
        std::vector<int> of_role;
        for (const auto& [r, rank] : ranks) {
            if (r == role) of_role.push_back(rank);
        }
        if (of_role.empty()) continue;
        parts.push_back(fmt::format("{} (of {})", describeRanks(role, of_role),
                                    role == Role::kFfn ? num_ffn_ranks : num_attention_ranks));
    }
    return fmt::format("{}", fmt::join(parts, " and "));
}

// Waits until the store holds key_of(r) for every rank r of `ranks`, or `deadline`: values[i] receives the value of
// ranks[i] (empty while it is missing), `missing` the ranks still absent at the deadline. Each time a slice of
// `progress` runs out before the deadline, report(the ranks still missing) runs. Errors other than a timeout end the
// wait and are returned.
template <typename KeyOf, typename Report>
core::Status awaitRankKeys(StoreClient& store, const std::vector<RankId>& ranks, KeyOf key_of, Deadline deadline,
                           WaitProgress& progress, Report report, std::vector<std::string>* values,
                           std::vector<RankId>* missing) {
    values->assign(ranks.size(), std::string());
    std::vector<size_t> pending;
    for (size_t i = 0; i < ranks.size(); ++i) pending.push_back(i);
    const auto stillMissing = [&] {
        std::vector<RankId> out;
        for (size_t i : pending) out.push_back(ranks[i]);
        return out;
    };
    // Takes the value of pending[k] when the store has it within `wait`; false when it does not.
    const auto take = [&](size_t k, milliseconds wait) -> core::Result<bool> {
        core::Result<std::string> value = store.get(key_of(ranks[pending[k]]), wait);
        if (!value.isOk()) {
            if (value.status().code() == core::StatusCode::kTimeout) return false;
            return value.status();
        }
        (*values)[pending[k]] = std::move(*value);
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(k));
        return true;
    };
    bool report_due = false;
    while (true) {
        // What is there already, without waiting (a report names only who is missing now); then a wait for the first
        // rank still missing until the slice ends.
        for (size_t k = 0; k < pending.size();) {
            AFD_ASSIGN_OR_RETURN(const bool taken, take(k, milliseconds(0)));
            if (!taken) ++k;
        }
        if (pending.empty() || Clock::now() >= deadline) break;
        if (report_due) report(stillMissing());
        AFD_ASSIGN_OR_RETURN(const bool taken, take(0, timeLeft(progress.sliceEnd())));
        report_due = !taken && progress.reportDue();
    }
    *missing = stillMissing();
    return core::Status::ok();
}

// The leader: the session open on the store (1, stored, on a new one).
core::Result<uint64_t> openSession(StoreClient& store, std::string_view where) {
    core::Result<std::string> open = store.get(kOpenSessionKey, milliseconds(0));
    if (open.isOk()) return decodeSessionNumber(*open, where);
    if (open.status().code() != core::StatusCode::kTimeout) return open.status().withContext(where);
    AFD_RETURN_IF_ERROR(store.set(kOpenSessionKey, encodeSessionNumber(1)));
    return uint64_t{1};
}

// Every other rank: the session the leader has open, waiting (until `deadline`) for the leader to open its first.
core::Result<uint64_t> awaitOpenSession(StoreClient& store, std::string_view self_name, std::string_view where,
                                        Clock::time_point start, Deadline deadline, milliseconds report_interval) {
    WaitProgress progress(start, deadline, report_interval);
    while (true) {
        core::Result<std::string> open = store.get(kOpenSessionKey, sliceWait(progress.sliceEnd()));
        if (open.isOk()) return decodeSessionNumber(*open, where);
        if (open.status().code() != core::StatusCode::kTimeout) return open.status().withContext(where);
        if (Clock::now() >= deadline) {
            return core::timeoutError("{} timed out after {}: ffn rank 0 never opened a session", where,
                                      formatDuration(std::chrono::duration_cast<milliseconds>(Clock::now() - start)));
        }
        if (progress.reportDue()) {
            AFD_LOG_INFO("{}: waiting for ffn rank 0 to open a session at {} ({})", self_name,
                         store.address().toString(), progress.progress());
        }
    }
}

// Once this rank has read the records: waits until every rank of `ranks` has read them too (its seen key of
// `session` is set) or has left the session (its record is gone with its connection: it needs the store no more), or
// `deadline`; `unseen` receives the ranks that did neither. Each time a slice of `progress` runs out, report(them).
template <typename Report>
core::Status awaitSeen(StoreClient& store, const std::vector<RankId>& ranks, uint64_t session, Deadline deadline,
                       WaitProgress& progress, Report report, std::vector<RankId>* unseen) {
    // How long a wait for one rank's seen key lasts before the others, and departures, are looked at again.
    constexpr milliseconds kRecheck(50);
    std::vector<RankId> pending = ranks;
    const auto present = [&](const std::string& key) -> core::Result<bool> {
        core::Result<std::string> value = store.get(key, milliseconds(0));
        if (value.isOk()) return true;
        if (value.status().code() == core::StatusCode::kTimeout) return false;
        return value.status();
    };
    while (true) {
        for (size_t k = 0; k < pending.size();) {
            const auto& [role, rank] = pending[k];
            AFD_ASSIGN_OR_RETURN(const bool seen, present(sessionSeenKey(session, role, rank)));
            bool done = seen;
            if (!done) {
                AFD_ASSIGN_OR_RETURN(const bool registered, present(sessionRankKey(session, role, rank)));
                done = !registered;
            }
            if (done) {
                pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(k));
            } else {
                ++k;
            }
        }
        if (pending.empty() || Clock::now() >= deadline) break;
        if (progress.reportDue()) report(pending);
        const auto& [role, rank] = pending.front();
        core::Result<std::string> seen =
            store.get(sessionSeenKey(session, role, rank), std::min(kRecheck, timeLeft(progress.sliceEnd())));
        if (!seen.isOk() && seen.status().code() != core::StatusCode::kTimeout) return seen.status();
    }
    *unseen = std::move(pending);
    return core::Status::ok();
}

}  // namespace

std::string describeRank(Role role, int rank) { return fmt::format("{} rank {}", roleName(role), rank); }

std::string describeRanks(Role role, std::span<const int> ranks) {
    if (ranks.size() == 1) return describeRank(role, ranks[0]);
    return fmt::format("{} ranks {}", roleName(role), fmt::join(ranks, ", "));
}

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
                         client_->setIfAbsent(sessionBlobKey(self_.session, self_.role, self_.rank, key), value,
                                              KeyLifetime::kConnection));
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
    const Deadline deadline = deadlineAfter(timeout);
    WaitProgress progress(deadline, report_interval_);
    while (true) {
        core::Result<std::string> value =
            client_->get(sessionBlobKey(self_.session, role, rank, key), timeLeft(progress.sliceEnd()));
        if (value.isOk()) return value;
        if (value.status().code() != core::StatusCode::kTimeout) return value.status().withContext(where);
        if (Clock::now() >= deadline) {
            return core::timeoutError("{}: {} did not publish '{}' within {}", where, describeRank(role, rank), key,
                                      formatDuration(timeout));
        }
        if (progress.reportDue()) {
            AFD_LOG_INFO("{}: {} waiting for {} to publish '{}' ({})", where, describeRank(self_.role, self_.rank),
                         describeRank(role, rank), key, progress.progress());
        }
    }
}

core::Status Rendezvous::awaitAttention(const RendezvousOptions& options, bool* moved) {
    const std::string where = fmt::format("rendezvous at {}", store_address_);
    const std::string self_name = describeRank(self_.role, self_.rank);
    const std::string key = sessionRankKey(self_.session, Role::kAttention, 0);
    WaitProgress progress(kNoDeadline, options.idle_report_interval);
    while (true) {
        const milliseconds wait = std::min(kIdleCheckInterval, sliceWait(progress.sliceEnd()));
        core::Result<std::string> record = client_->get(key, wait);
        if (record.isOk()) return core::Status::ok();
        if (record.status().code() != core::StatusCode::kTimeout) return record.status().withContext(where);
        AFD_ASSIGN_OR_RETURN(const std::string open, client_->get(kOpenSessionKey, milliseconds(0)));
        AFD_ASSIGN_OR_RETURN(const uint64_t open_session, decodeSessionNumber(open, where));
        if (open_session != self_.session) {
            AFD_LOG_INFO("{}: {} leaves session {}, which closed before attention rank 0 came, for session {}", where,
                         self_name, self_.session, open_session);
            *moved = true;
            return core::Status::ok();
        }
        if (progress.reportDue()) {
            AFD_LOG_INFO("{}: {} waiting for a session: attention rank 0 has not registered in session {} at {} ({})",
                         where, self_name, self_.session, store_address_, progress.progress());
        }
    }
}

core::Result<std::unique_ptr<Rendezvous>> Rendezvous::join(const RendezvousOptions& options, RankRecord self,
                                                           std::vector<RendezvousBlob> blobs) {
    for (const RendezvousBlob& blob : blobs) AFD_RETURN_IF_ERROR(checkBlobKey(blob.key));
    while (true) {
        bool moved = false;
        core::Result<std::unique_ptr<Rendezvous>> joined = joinSession(options, self, blobs, &moved);
        if (!moved) return joined;
    }
}

core::Result<std::unique_ptr<Rendezvous>> Rendezvous::joinSession(const RendezvousOptions& options, RankRecord self,
                                                                  const std::vector<RendezvousBlob>& blobs,
                                                                  bool* moved) {
    const std::string where = fmt::format("rendezvous at {}", options.store.toString());
    const bool idle = options.session.idle_until_attention;
    // An idle rank has no deadline until attention rank 0 arrives; the timeout counts from then.
    Clock::time_point start = Clock::now();
    Deadline deadline = idle ? kNoDeadline : deadlineAfter(options.timeout);
    std::unique_ptr<Rendezvous> rv(new Rendezvous());
    rv->store_address_ = options.store.toString();
    rv->num_attention_ranks_ = options.num_attention_ranks;
    rv->num_ffn_ranks_ = options.num_ffn_ranks;
    rv->report_interval_ = options.report_interval;
    if (options.host_store && !options.store_started) {
        AFD_ASSIGN_OR_RETURN(rv->server_, StoreServer::start(options.store.host, options.store.port));
    }
    {
        core::Result<std::unique_ptr<StoreClient>> client =
            // A stopped store fails a call within the rendezvous timeout (when it is the shorter one).
            StoreClient::connect(options.store, deadline, options.cancel, options.report_interval,
                                 std::min(options.timeout, StoreClient::kDefaultReplySlack));
        if (!client.isOk()) return client.status().withContext(where);
        rv->client_ = std::move(*client);
    }
    StoreClient& store = *rv->client_;
    const std::string self_name = describeRank(self.role, self.rank);
    // The claim, before any session: a second live process with this rank fails here, whatever the sessions.
    self.session = 0;
    AFD_ASSIGN_OR_RETURN(
        std::optional<std::string> present,
        store.setIfAbsent(rankRecordKey(self.role, self.rank), encodeRankRecord(self), KeyLifetime::kConnection));
    if (present) {
        return core::mismatch("{}: {} is registered already (record {}); two processes claim the same rank", where,
                              self_name, *present);
    }
    if (options.host_store) {
        AFD_ASSIGN_OR_RETURN(self.session, openSession(store, where));
    } else {
        AFD_ASSIGN_OR_RETURN(self.session,
                             awaitOpenSession(store, self_name, where, start, deadline,
                                              idle ? options.idle_report_interval : options.report_interval));
    }
    const uint64_t session = self.session;
    rv->self_ = self;
    if (options.session.on_session) options.session.on_session(session);
    // However this join ends, the leader opens the next session: ranks that come from now on register there.
    const OnExit open_next([&] {
        // Cancelled: the rank is stopping, and its store with it.
        if (!options.host_store || (options.cancel != nullptr && options.cancel->cancelled())) return;
        const core::Status opened = store.set(kOpenSessionKey, encodeSessionNumber(session + 1));
        if (!opened.isOk() && opened.code() != core::StatusCode::kCancelled) {
            AFD_LOG_WARN("{}: opening session {}: {}", where, session + 1, opened.message());
        }
    });
    // Blobs before the record: a peer that has read the record finds them.
    for (const RendezvousBlob& blob : blobs) AFD_RETURN_IF_ERROR(rv->publishBlob(blob.key, blob.value, where));
    AFD_ASSIGN_OR_RETURN(present, store.setIfAbsent(sessionRankKey(session, self.role, self.rank),
                                                    encodeRankRecord(self), KeyLifetime::kConnection));
    if (present) {
        return core::mismatch(
            "{}: {} is registered in session {} already (record {}); two processes claim the same "
            "rank",
            where, self_name, session, *present);
    }
    AFD_LOG_INFO("{}: registered as {} in session {}, waiting for {} attention and {} ffn ranks", where, self_name,
                 session, options.num_attention_ranks, options.num_ffn_ranks);
    if (idle && !(self.role == Role::kAttention && self.rank == 0)) {
        AFD_RETURN_IF_ERROR(rv->awaitAttention(options, moved));
        if (*moved) return core::Status(core::StatusCode::kCancelled, fmt::format("{}: session closed", where));
        start = Clock::now();
        deadline = deadlineAfter(options.timeout);
    }

    // Wait for every rank, FFN ranks first; after the deadline, list everyone still missing.
    std::vector<RankId> expected;
    for (int r = 0; r < options.num_ffn_ranks; ++r) expected.emplace_back(Role::kFfn, r);
    for (int r = 0; r < options.num_attention_ranks; ++r) expected.emplace_back(Role::kAttention, r);
    const auto awaited = [&](const std::vector<RankId>& ranks) {
        return describeAwaited(ranks, options.num_attention_ranks, options.num_ffn_ranks);
    };
    std::vector<std::string> texts;
    std::vector<RankId> missing;
    {
        WaitProgress progress(start, deadline, options.report_interval);
        const core::Status waited = awaitRankKeys(
            store, expected, [session](const RankId& r) { return sessionRankKey(session, r.first, r.second); },
            deadline, progress,
            [&](const std::vector<RankId>& still) {
                AFD_LOG_INFO("{}: waiting for {} to register at {} ({})", self_name, awaited(still), rv->store_address_,
                             progress.progress());
            },
            &texts, &missing);
        if (!waited.isOk()) return waited.withContext(where);
    }
    if (!missing.empty()) {
        std::vector<std::string> names;
        for (const auto& [role, rank] : missing) names.push_back(describeRank(role, rank));
        return core::timeoutError("{} timed out after {}: {} never registered", where,
                                  formatDuration(std::chrono::duration_cast<milliseconds>(Clock::now() - start)),
                                  fmt::join(names, ", "));
    }
    std::vector<RankRecord> all;
    for (size_t i = 0; i < expected.size(); ++i) {
        AFD_ASSIGN_OR_RETURN(RankRecord record,
                             decodeRankRecord(texts[i], expected[i].first, expected[i].second, where));
        if (record.session != session) {
            return core::corrupt("{}: the record of {} in session {} names session {}", where,
                                 describeRank(record.role, record.rank), session, record.session);
        }
        all.push_back(std::move(record));
    }
    AFD_RETURN_IF_ERROR(store.set(sessionSeenKey(session, self.role, self.rank), "1", KeyLifetime::kConnection));

    const core::Status compared = comparePeers(self, all, where);
    {
        // Stay until every rank has read the records (or left): each rank's record leaves with its connection, so a
        // rank that returned at once could take its record away from one still reading, and the host serves the
        // store for as long as anyone reads. So every rank sees the same mismatches as this one.
        WaitProgress progress(start, deadline, options.report_interval);
        std::vector<RankId> unseen;
        const core::Status waited = awaitSeen(
            store, expected, session, deadline, progress,
            [&](const std::vector<RankId>& still) {
                AFD_LOG_INFO("{}: {} waiting for {} to read the records ({})", where, self_name, awaited(still),
                             progress.progress());
            },
            &unseen);
        if (waited.code() == core::StatusCode::kCancelled) return waited.withContext(where);
        if (!waited.isOk()) {
            AFD_LOG_WARN("{}: waiting for every rank to read the records: {}", where, waited.message());
        } else if (!unseen.empty()) {
            AFD_LOG_WARN("{}: {} did not confirm reading the records within {}", where, awaited(unseen),
                         formatDuration(options.timeout));
        }
    }
    AFD_RETURN_IF_ERROR(compared);

    for (RankRecord& record : all) {
        (record.role == Role::kAttention ? rv->attention_ : rv->ffn_).push_back(std::move(record));
    }
    AFD_LOG_INFO("{}: all {} ranks registered in session {}", where, rv->attention_.size() + rv->ffn_.size(), session);
    return rv;
}

}  // namespace afd::transport
