// The down kernel starting per expert (MoeCudaPlan::down_per_expert, GroupedGemmArgs::h_ready): instead of waiting
// for the whole gate-up grid, each down item waits until every gate-up item of its expert has written its h rows, so
// the down CTAs that take the SMs of finished gate-up CTAs stream while the gate-up kernel's last items still run.
//
// Gate-up side, per CTA: after each item both consumer warpgroups post it to a small ring in shared memory (their
// epilogue stores ordered before the post by a warpgroup barrier and the mbarrier's release); producer warp 3 takes
// the posts in order and adds one per item to h_ready[expert] with release at GPU scope. The consumers never stall for
// the GPU-scope release (an inline release after each epilogue stalled its warpgroup).
// Down side: the producer acquires h_ready[expert] >= gate-up items of the expert, then orders its TMA loads of h after
// it (fence.proxy.async); the last down CTA done with the counts zeroes them (releaseExpertCounts).
#pragma once

#include <cstdint>

#include "kernels/cuda/sm90_ptx.cuh"

namespace afd::kernels::cuda::grouped_gemm {

// The post ring of one CTA: full[s] completes when every consumer warpgroup posted the item in slot s (count = the
// consumers), empty[s] when the counting thread has read it (count 1); ring[s] holds the item's expert, -1 = the CTA
// has no more items.
struct ItemDoneRing {
    uint64_t* full;
    uint64_t* empty;
    int* ring;
};

// Consumer warpgroup wg (all 128 threads, ctid 0-127): the CTA's n-th item, of `expert`, has its epilogue stores
// issued by every thread; warpgroup barrier `barrier_id`, then thread 0 posts it. Warpgroup 0 writes the expert.
// kColdTrap: the barrier waits trap out of line (warpgroups whose registers setmaxnreg raised, mbarWaitColdTrap).
template <int kSlots, bool kColdTrap>
__device__ __forceinline__ void postItemDone(const ItemDoneRing& r, int n, int expert, int wg, int ctid,
                                             int barrier_id) {
    sm90::namedBarrierSync(barrier_id, 128);  // every thread's stores are ordered before thread 0's arrival
    if (ctid == 0) {
        const int slot = n % kSlots;
        sm90::mbarWaitBounded<kColdTrap>(&r.empty[slot], ((n / kSlots) & 1) ^ 1);
        if (wg == 0) {
            r.ring[slot] = expert;
        }
        sm90::mbarArrive(&r.full[slot]);  // release at CTA scope
    }
}

// The counting thread (gate-up producer warp 3, lane 0): adds each posted item to its expert's count with release at
// GPU scope (cumulative: it covers the consumers' stores it acquired through the mbarrier), until the -1.
template <int kSlots, bool kColdTrap>
__device__ void countItemsDone(const ItemDoneRing& r, int32_t* h_ready) {
    for (int n = 0;; ++n) {
        const int slot = n % kSlots;
        sm90::mbarWaitBounded<kColdTrap>(&r.full[slot], (n / kSlots) & 1);
        const int expert = r.ring[slot];
        sm90::mbarArrive(&r.empty[slot]);
        if (expert < 0) {
            return;
        }
        sm90::redAddReleaseGpu(h_ready + expert, 1);
    }
}

// The counting thread of tall128g (producer thread 0, which also copies token rows: Layout::kTall128Gather): takes
// the posts that are already there between its copies, never waiting for one, so that the consumers never stall on a
// full ring while it copies. n: the next post to take; finished: the -1 was taken.
template <int kSlots>
struct ItemDonePoller {
    int n = 0;
    bool finished = false;

    // Takes every post already in the ring.
    __device__ __forceinline__ void poll(const ItemDoneRing& r, int32_t* counts) {
        while (!finished) {
            const int slot = n % kSlots;
            if (!sm90::mbarTestWait(&r.full[slot], (n / kSlots) & 1)) {
                return;
            }
            const int value = r.ring[slot];
            sm90::mbarArrive(&r.empty[slot]);
            ++n;
            if (value < 0) {
                finished = true;
                return;
            }
            sm90::redAddReleaseGpu(counts + value, 1);
        }
    }

    // Waits (bounded) for the phase of `bar` with the given parity, taking posts while it waits. try_wait suspends the
    // thread for a while between polls: a thread spinning on test_wait takes issue slots from the consumer warps of
    // its SM sub-partition.
    __device__ __forceinline__ void waitPolling(uint64_t* bar, uint32_t parity, const ItemDoneRing& r,
                                                int32_t* counts) {
        uint32_t polls = 0;
        while (!sm90::mbarTryWait(bar, parity)) {
            poll(r, counts);
            if (++polls == (1u << 28)) {
                sm90::trapOutOfLine();
            }
        }
    }

    // After the thread's last copy: takes the remaining posts, waiting for each, up to the -1.
    __device__ __forceinline__ void finish(const ItemDoneRing& r, int32_t* counts) {
        while (!finished) {
            const int slot = n % kSlots;
            sm90::mbarWaitBounded<true>(&r.full[slot], (n / kSlots) & 1);
            poll(r, counts);
        }
    }
};

// Down producer about to load the h rows of `expert`: waits until its `items` gate-up items are counted (acquire), then
// orders its later TMA loads (async proxy) after what that made visible.
__device__ __forceinline__ void waitExpertReady(const int32_t* h_ready, int expert, int items) {
    sm90::waitAtLeastAcquire(h_ready + expert, items);
    sm90::fenceProxyAsyncGlobal();
}

}  // namespace afd::kernels::cuda::grouped_gemm
