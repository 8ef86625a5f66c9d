// Thin device wrappers over the Hopper (sm_90a) instructions the MoE kernels use: mbarriers, the bulk tensor copy
// engine (TMA), cp.async with mbarrier completion, wgmma descriptors and fences, named barriers, programmatic dependent
// launch.
// Included by .cu files only.
#pragma once

#include <cstdint>

namespace afd::kernels::cuda::sm90 {

__device__ __forceinline__ uint32_t smemAddr(const void* ptr) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// ---- mbarrier -------------------------------------------------------------------------------------------------

__device__ __forceinline__ void mbarInit(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smemAddr(bar)), "r"(count) : "memory");
}

// Makes initialised barriers visible to the async proxy (TMA) and to the other threads after a __syncthreads.
__device__ __forceinline__ void fenceBarrierInit() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbarArrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smemAddr(bar)) : "memory");
}

__device__ __forceinline__ void mbarArriveExpectTx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smemAddr(bar)), "r"(bytes) : "memory");
}

// One poll of the phase with the given parity (acquire at CTA scope).
__device__ __forceinline__ bool mbarTryWait(uint64_t* bar, uint32_t parity) {
    uint32_t done;
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(smemAddr(bar)), "r"(parity)
        : "memory");
    return done != 0;
}

// Whether the phase with the given parity has completed, without suspending the thread (test_wait; try_wait may
// wait a while): for a thread that has other work between its polls.
__device__ __forceinline__ bool mbarTestWait(uint64_t* bar, uint32_t parity) {
    uint32_t done;
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(smemAddr(bar)), "r"(parity)
        : "memory");
    return done != 0;
}

// A trap called rather than inlined (mbarWaitColdTrap).
__device__ __noinline__ inline void trapOutOfLine() { __trap(); }

// Waits until the phase with the given parity has completed. A pipeline that stops making progress is a bug
// (a lost arrival, a wrong byte count): after ~2^28 polls (seconds) the kernel traps instead of hanging the
// device, which the host sees as a launch failure. kOutOfLineTrap: for warpgroups whose registers were raised by
// setmaxnreg, where an inlined trap made ptxas allocate their code within the kernel's launch budget (spills and
// serialized wgmma, C7512); elsewhere the inlined trap stays (the call's register convention cost the 256-token
// kernels a spill).
template <bool kOutOfLineTrap>
__device__ __forceinline__ void mbarWaitBounded(uint64_t* bar, uint32_t parity) {
    uint32_t polls = 0;
    while (!mbarTryWait(bar, parity)) {
        if (++polls == (1u << 28)) {
            if constexpr (kOutOfLineTrap) {
                trapOutOfLine();
            } else {
                __trap();
            }
        }
    }
}
__device__ __forceinline__ void mbarWait(uint64_t* bar, uint32_t parity) { mbarWaitBounded<false>(bar, parity); }
__device__ __forceinline__ void mbarWaitColdTrap(uint64_t* bar, uint32_t parity) { mbarWaitBounded<true>(bar, parity); }

// Per-warpgroup register budget (setmaxnreg; every warp of the warpgroup executes it): the producer gives
// registers back to the CTA's pool, the consumers take them.
template <int kRegs>
__device__ __forceinline__ void setMaxRegsDec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setMaxRegsInc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// ---- bulk tensor copy (TMA) -----------------------------------------------------------------------------------

__device__ __forceinline__ void prefetchTensorMap(const void* tmap) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(tmap)) : "memory");
}

// Atomic add at device scope with acquire and release semantics: the writes that happen before it (this thread's,
// and other threads' ordered before it by a barrier) are visible to whoever observes the new value, and the
// writes of the arrivals it observes are visible to this thread's later reads. Returns the old value.
__device__ __forceinline__ int atomicAddAcqRel(int* ptr, int value) {
    int old;
    asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(ptr), "r"(value) : "memory");
    return old;
}

// L2 policy for data read once (streamed weights): evict first.
__device__ __forceinline__ uint64_t policyEvictFirst() {
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}

// Bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned) from global memory into this CTA's shared
// memory; completes `bytes` of transaction count on bar.
__device__ __forceinline__ void bulkLoad(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smemAddr(dst)),
        "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(smemAddr(bar))
        : "memory");
}

// bulkLoad with an L2 policy (createpolicy) for the bytes read.
__device__ __forceinline__ void bulkLoad(void* dst, const void* src, uint32_t bytes, uint64_t* bar, uint64_t policy) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::
            "r"(smemAddr(dst)),
        "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(smemAddr(bar)), "l"(policy)
        : "memory");
}

// 2-D tiled load of box {c0.., c1..} of `tmap` into shared memory at `dst`, completing `bytes` on `bar`.
__device__ __forceinline__ void tmaLoad2d(void* dst, const void* tmap, uint64_t* bar, int32_t c0, int32_t c1,
                                          uint64_t policy) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
        " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smemAddr(dst)),
        "l"(reinterpret_cast<uint64_t>(tmap)), "r"(smemAddr(bar)), "r"(c0), "r"(c1), "l"(policy)
        : "memory");
}

// 5-D tiled load of the box at {c0 … c4} of `tmap` (same completion as tmaLoad2d).
__device__ __forceinline__ void tmaLoad5d(void* dst, const void* tmap, uint64_t* bar, int32_t c0, int32_t c1,
                                          int32_t c2, int32_t c3, int32_t c4, uint64_t policy) {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
        " [%0], [%1, {%3, %4, %5, %6, %7}], [%2], %8;" ::"r"(smemAddr(dst)),
        "l"(reinterpret_cast<uint64_t>(tmap)), "r"(smemAddr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4),
        "l"(policy)
        : "memory");
}

// L2 policy for data read again by other items at about the same time: evict normally.
__device__ __forceinline__ uint64_t policyEvictNormal() {
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}

// L2 policy for data read again soon (token tiles shared by the items of one expert): evict last.
__device__ __forceinline__ uint64_t policyEvictLast() {
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}

// ---- device-wide counts between kernels that run side by side (the slot-order gather and the gate-up kernel) -----

// Adds `value` to *ptr with release at GPU scope: whatever this thread has done before (and, through a CTA barrier,
// the other threads of that barrier) is visible to a GPU-scope acquire that reads the sum.
__device__ __forceinline__ void redAddReleaseGpu(int* ptr, int value) {
    asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(ptr), "r"(value) : "memory");
}

__device__ __forceinline__ int ldAcquireGpu(const int* ptr) {
    int value;
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(value) : "l"(ptr) : "memory");
    return value;
}

// Orders this thread's generic-proxy accesses of global memory before its later async-proxy ones (TMA): a TMA load
// issued after it reads what a generic acquire made visible.
__device__ __forceinline__ void fenceProxyAsyncGlobal() { asm volatile("fence.proxy.async.global;" ::: "memory"); }

// Waits until *ptr >= target (acquire). Bounded like mbarWaitBounded: a count that never arrives traps after
// ~2^25 polls of >= 128 ns (seconds) instead of hanging the device. Inlined, with the trap out of line: a call to the
// whole wait (it was __noinline__) from the consumer warpgroups of the register-rebalanced shapes made ptxas ignore
// their setmaxnreg, spill and serialize their wgmma (C7507, C7512; wide288's gate-up kernel since the waits on the
// permute's words).
__device__ __forceinline__ void waitAtLeastAcquire(const int* ptr, int target) {
    uint32_t polls = 0;
    while (ldAcquireGpu(ptr) < target) {
        __nanosleep(128);
        if (++polls == (1u << 25)) {
            trapOutOfLine();
        }
    }
}

// ---- cp.async (16-byte, L2 only) ------------------------------------------------------------------------------

// Copies 16 bytes from global `src` to shared `dst`; with `valid` false writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cpAsync16(uint32_t dst, const void* src, bool valid) {
    const uint32_t src_size = valid ? 16u : 0u;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_size) : "memory");
}

// cpAsync16 (valid) with an L2 policy (createpolicy) for the bytes read.
__device__ __forceinline__ void cpAsync16(uint32_t dst, const void* src, uint64_t policy) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "l"(policy)
                 : "memory");
}

// cpAsync16 (zero-filled when not `valid`) with an L2 policy for the bytes read.
__device__ __forceinline__ void cpAsync16(uint32_t dst, const void* src, bool valid, uint64_t policy) {
    const uint32_t src_size = valid ? 16u : 0u;
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;" ::"r"(dst), "l"(src), "r"(src_size),
                 "l"(policy)
                 : "memory");
}

// Arrives on `bar` once all cp.async of this thread issued so far have landed (counts as one of the barrier's
// expected arrivals).
__device__ __forceinline__ void cpAsyncArriveNoinc(uint64_t* bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smemAddr(bar)) : "memory");
}

// Orders this thread's view of shared memory written through the generic proxy (st.shared, cp.async) before its
// later async-proxy accesses (wgmma operand reads, TMA).
__device__ __forceinline__ void fenceProxyAsyncShared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// ---- wgmma ----------------------------------------------------------------------------------------------------

// Shared-memory matrix descriptor for a K-major bf16 tile stored as rows of 128 bytes (64 elements) with the
// 128-byte swizzle, 8-row groups 1024 bytes apart; the tile base must be 1024-byte aligned.
__device__ __forceinline__ uint64_t makeSmemDesc(const void* tile) {
    const uint64_t addr = smemAddr(tile);
    uint64_t desc = (addr & 0x3FFFFull) >> 4;  // start address, 16-byte units
    desc |= 1ull << 16;                        // leading byte offset (unused for swizzled K-major)
    desc |= (1024ull >> 4) << 32;              // stride byte offset: 8 rows x 128 bytes
    desc |= 1ull << 62;                        // layout: 128-byte swizzle
    return desc;
}

__device__ __forceinline__ void wgmmaFence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmmaCommit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmmaWait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving accumulator reads/writes across wgmma issue/wait points.
__device__ __forceinline__ void fenceOperand(float& reg) { asm volatile("" : "+f"(reg)::"memory"); }

// ---- named barriers, programmatic dependent launch -------------------------------------------------

__device__ __forceinline__ void namedBarrierSync(uint32_t id, uint32_t threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Blocks until the grids this one depends on (programmatic launch) have completed and their writes are visible;
// a no-op for a normal launch.
__device__ __forceinline__ void gridDependencyWait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
// Lets the next kernel in the stream (launched with programmatic serialization) start its prologue.
__device__ __forceinline__ void launchDependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// Stores 8x8 b16 matrices transposed (stmatrix .trans), one per register: each thread's register k holds its
// fragment of matrix k (row lane / 4, columns 2 (lane % 4) and +1, low half first), which is the layout of a wgmma
// accumulator pair packed to bf16x2; threads 8k … 8k + 7 give the shared addresses (16-byte aligned) of the rows of
// matrix k, and row i receives column i of the fragment matrix.
__device__ __forceinline__ void stmatrixTrans(uint32_t addr, uint32_t r0) {
    asm volatile("stmatrix.sync.aligned.m8n8.x1.trans.shared.b16 [%0], {%1};" ::"r"(addr), "r"(r0) : "memory");
}
__device__ __forceinline__ void stmatrixTrans(uint32_t addr, uint32_t r0, uint32_t r1) {
    asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};" ::"r"(addr), "r"(r0), "r"(r1)
                 : "memory");
}

}  // namespace afd::kernels::cuda::sm90
