// NcclComms: one rank's NCCL communicators, one per stage (kMaxStages), each spanning every rank of the deployment
// (global ranks: nccl_ranks.h). A stage has a communicator of its own because NCCL runs the operations of one
// communicator in the order they were posted, across streams: with one for both stages of a dual-batch step, the
// attention rank's dispatch of stage 1 (posted before its combine of stage 0) would wait, once frames outgrow NCCL's
// buffers, for the FFN's receive of stage 1, which the FFN posts after its send of stage 0, which waits for that
// combine. (So the FFN must also serve the two stages on two streams: on one, its stream order closes the same cycle.)
//
// Communicators are non-blocking (ncclConfig_t::blocking = 0): init and every group return at once and are polled, so
// no call here waits on a peer without a deadline, and an abort may come from another thread.
//
// Threads: post() is called by one thread at a time (the connector's user); abort() and asyncError() by any thread.
// A mutex serialises every NCCL call: post() holds it during NCCL's non-blocking calls and lets go of it between its
// polls, so an abort waits for at most one call. ncclCommAbort ends every kernel of the communicator still running and
// frees it; after it, post() refuses (kCancelled) and no NCCL call touches the communicators again.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "transport/socket.h"

namespace afd::transport::nccl {

// One point-to-point transfer of a group: `bytes` (> 0) bytes to or from the communicator rank `peer`.
struct NcclTransfer {
    bool send = false;
    void* buffer = nullptr;  // device memory on the communicators' GPU: read (send) or written (receive)
    size_t bytes = 0;
    int peer = 0;
};

class NcclComms {
public:
    // `count` fresh unique ids (ncclGetUniqueId: the caller becomes the root of the communicators' bootstrap).
    static core::Result<std::vector<std::string>> newUniqueIds(size_t count);

    // Joins one communicator per id as `rank` of `nranks` on `gpu`, and waits until every one is ready, until
    // `timeout` (kTimeout: a rank did not join) or until `cancel` (kCancelled). Errors name `self`, the global rank
    // and the stage. `post_timeout` bounds the wait for a group to be enqueued (post()).
    static core::Result<std::unique_ptr<NcclComms>> init(std::span<const std::string> ids, int nranks, int rank,
                                                         int gpu, std::chrono::milliseconds timeout,
                                                         const Canceller* cancel, std::string self,
                                                         std::chrono::milliseconds post_timeout);
    ~NcclComms();  // aborts the communicators not aborted yet (bounded: no kernel of theirs survives)
    NcclComms(const NcclComms&) = delete;
    NcclComms& operator=(const NcclComms&) = delete;

    int rank() const { return rank_; }
    int size() const { return nranks_; }
    size_t numCommunicators() const { return comms_.size(); }

    // One group on the communicator of `stage`: every transfer on `stream` (a cudaStream_t of the communicators' GPU),
    // then waits until NCCL has enqueued the group (bounded by `timeout`, or the post timeout when 0: past it the
    // communicators are aborted and kTimeout returned). Work the caller enqueues on `stream` afterwards runs after
    // the group's transfers. Capturable: in a capture the group is recorded, not run.
    core::Status post(size_t stage, std::span<const NcclTransfer> transfers, void* stream,
                      std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

    // Any thread, idempotent: aborts every communicator (blocking until NCCL has ended their kernels).
    void abort();
    bool aborted() const;
    // Any thread: the first asynchronous error any communicator reports (a failed peer, network or CUDA error), ok
    // while none (and once aborted).
    core::Status asyncError();

private:
    NcclComms() = default;
    void abortLocked();
    core::Status abortedStatus() const;

    mutable std::mutex mutex_;
    std::vector<void*> comms_;  // ncclComm_t, one per stage; null once aborted
    bool aborted_ = false;
    int rank_ = 0;
    int nranks_ = 0;
    int gpu_ = 0;
    std::string self_;
    std::chrono::milliseconds post_timeout_{60000};
};

}  // namespace afd::transport::nccl
