#include "transport/nccl/nccl_comms.h"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <cstring>
#include <thread>

#include "core/check.h"
#include "core/logging.h"
#include "transport/nccl/nccl_ranks.h"

namespace afd::transport::nccl {
namespace {

static_assert(sizeof(ncclUniqueId) == kUniqueIdBytes);

ncclComm_t commOf(void* p) { return static_cast<ncclComm_t>(p); }

// A remote or network failure means a peer (or the way to it) is gone; anything else is this rank's problem.
core::StatusCode codeOf(ncclResult_t r) {
    return r == ncclRemoteError || r == ncclSystemError ? core::StatusCode::kPeerLost : core::StatusCode::kInternal;
}

core::Status ncclStatus(ncclResult_t r, ncclComm_t comm, std::string_view what) {
    const char* last = comm != nullptr ? ncclGetLastError(comm) : nullptr;
    return core::makeStatus(codeOf(r), "nccl: {}: {}{}", what, ncclGetErrorString(r),
                            last != nullptr && *last != '\0' ? fmt::format(" ({})", last) : std::string());
}

core::Status cudaStatus(cudaError_t err, std::string_view what) {
    if (err == cudaSuccess) return core::Status::ok();
    return core::internalError("nccl: {}: {}", what, cudaGetErrorString(err));
}

bool finished(ncclResult_t r) { return r != ncclInProgress; }

}  // namespace

core::Result<std::vector<std::string>> NcclComms::newUniqueIds(size_t count) {
    std::vector<std::string> ids;
    for (size_t i = 0; i < count; ++i) {
        ncclUniqueId id;
        const ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) return ncclStatus(r, nullptr, "making the communicators' unique id");
        ids.emplace_back(id.internal, sizeof(id.internal));
    }
    return ids;
}

core::Result<std::unique_ptr<NcclComms>> NcclComms::init(std::span<const std::string> ids, int nranks, int rank,
                                                         int gpu, std::chrono::milliseconds timeout,
                                                         const Canceller* cancel, std::string self,
                                                         std::chrono::milliseconds post_timeout) {
    AFD_CHECK(!ids.empty() && nranks >= 1 && rank >= 0 && rank < nranks, "{} ids, rank {} of {}", ids.size(), rank,
              nranks);
    std::unique_ptr<NcclComms> c(new NcclComms());
    c->rank_ = rank;
    c->nranks_ = nranks;
    c->gpu_ = gpu;
    c->self_ = fmt::format("{} (global rank {} of {})", self, rank, nranks);
    c->post_timeout_ = post_timeout;
    AFD_RETURN_IF_ERROR(cudaStatus(cudaSetDevice(gpu), fmt::format("selecting cuda:{}", gpu)));
    for (size_t stage = 0; stage < ids.size(); ++stage) {
        AFD_CHECK(ids[stage].size() == kUniqueIdBytes, "an NCCL unique id of {} bytes", ids[stage].size());
        ncclUniqueId id;
        std::memcpy(id.internal, ids[stage].data(), sizeof(id.internal));
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        ncclComm_t comm = nullptr;
        const ncclResult_t r = ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
        if (comm != nullptr) c->comms_.push_back(comm);  // the destructor aborts it whatever follows
        if (r != ncclSuccess && r != ncclInProgress) {
            return ncclStatus(r, comm, fmt::format("{}: joining the communicator of stage {}", c->self_, stage));
        }
    }
    // Every communicator initialises on its own thread inside NCCL; poll them all.
    const Deadline deadline = deadlineAfter(timeout);
    for (;;) {
        bool all_ready = true;
        for (size_t stage = 0; stage < c->comms_.size(); ++stage) {
            ncclResult_t state = ncclSuccess;
            const ncclResult_t r = ncclCommGetAsyncError(commOf(c->comms_[stage]), &state);
            if (r != ncclSuccess) state = r;
            if (!finished(state)) {
                all_ready = false;
            } else if (state != ncclSuccess) {
                return ncclStatus(state, commOf(c->comms_[stage]),
                                  fmt::format("{}: joining the communicator of stage {}", c->self_, stage));
            }
        }
        if (all_ready) break;
        if (cancel != nullptr && cancel->cancelled()) {
            return core::makeStatus(core::StatusCode::kCancelled, "nccl: {}: stopped while joining the communicators",
                                    c->self_);
        }
        if (Clock::now() >= deadline) {
            return core::timeoutError(
                "nccl: {}: the communicators were not ready within afd.connect_timeout_s ({} s): a rank of the "
                "deployment did not join them, or cannot reach this one",
                c->self_, std::chrono::duration<double>(timeout).count());
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    AFD_LOG_INFO("nccl: {} joined {} communicators on cuda:{}", c->self_, c->comms_.size(), gpu);
    return c;
}

NcclComms::~NcclComms() { abort(); }

core::Status NcclComms::abortedStatus() const {
    return core::makeStatus(core::StatusCode::kCancelled,
                            "nccl: {}: the communicators were aborted (the connector failed or was stopped)", self_);
}

core::Status NcclComms::post(size_t stage, std::span<const NcclTransfer> transfers, void* stream,
                             std::chrono::milliseconds timeout) {
    AFD_CHECK(stage < comms_.size(), "stage {} of {} communicators", stage, comms_.size());
    if (transfers.empty()) return core::Status::ok();
    std::unique_lock<std::mutex> lock(mutex_);
    if (aborted_) return abortedStatus();
    ncclComm_t comm = commOf(comms_[stage]);
    const auto s = static_cast<cudaStream_t>(stream);
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) return ncclStatus(r, comm, "ncclGroupStart");
    for (const NcclTransfer& t : transfers) {
        r = t.send ? ncclSend(t.buffer, t.bytes, ncclUint8, t.peer, comm, s)
                   : ncclRecv(t.buffer, t.bytes, ncclUint8, t.peer, comm, s);
        if (r != ncclSuccess && r != ncclInProgress) {
            (void)ncclGroupEnd();
            return ncclStatus(r, comm,
                              fmt::format("{} of {} bytes {} global rank {}", t.send ? "ncclSend" : "ncclRecv", t.bytes,
                                          t.send ? "to" : "from", t.peer));
        }
    }
    r = ncclGroupEnd();
    if (r != ncclSuccess && r != ncclInProgress) return ncclStatus(r, comm, "ncclGroupEnd");
    // Non-blocking: NCCL enqueues the group on a thread of its own. Wait for it, letting an abort in between polls.
    const std::chrono::milliseconds bound = timeout.count() > 0 ? timeout : post_timeout_;
    const Deadline deadline = deadlineAfter(bound);
    for (;;) {
        ncclResult_t state = ncclSuccess;
        r = ncclCommGetAsyncError(comm, &state);
        if (r != ncclSuccess) state = r;
        if (state == ncclSuccess) return core::Status::ok();
        if (finished(state)) return ncclStatus(state, comm, fmt::format("a group of stage {}", stage));
        if (Clock::now() >= deadline) {
            abortLocked();
            return core::timeoutError("nccl: {}: a group of stage {} was not enqueued within {} s", self_, stage,
                                      std::chrono::duration<double>(bound).count());
        }
        lock.unlock();
        std::this_thread::yield();
        lock.lock();
        if (aborted_) return abortedStatus();
    }
}

void NcclComms::abort() {
    std::lock_guard<std::mutex> lock(mutex_);
    abortLocked();
}

void NcclComms::abortLocked() {
    if (aborted_) return;
    aborted_ = true;
    for (void*& comm : comms_) {
        if (comm == nullptr) continue;
        const ncclResult_t r = ncclCommAbort(commOf(comm));
        if (r != ncclSuccess) AFD_LOG_WARN("nccl: {}: aborting a communicator: {}", self_, ncclGetErrorString(r));
        comm = nullptr;
    }
}

bool NcclComms::aborted() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return aborted_;
}

core::Status NcclComms::asyncError() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_) return core::Status::ok();
    for (size_t stage = 0; stage < comms_.size(); ++stage) {
        ncclResult_t state = ncclSuccess;
        const ncclResult_t r = ncclCommGetAsyncError(commOf(comms_[stage]), &state);
        if (r != ncclSuccess) state = r;
        if (state != ncclSuccess && state != ncclInProgress) {
            return ncclStatus(state, commOf(comms_[stage]),
                              fmt::format("{}: the communicator of stage {} failed", self_, stage));
        }
    }
    return core::Status::ok();
}

}  // namespace afd::transport::nccl
