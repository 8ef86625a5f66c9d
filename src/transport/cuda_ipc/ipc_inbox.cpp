#include "transport/cuda_ipc/ipc_inbox.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>

#include "core/logging.h"

namespace afd::transport::cuda_ipc {
namespace {

constexpr uint32_t kBlobMagic = 0x49444641;  // "AFDI"
constexpr uint32_t kBlobVersion = 2;
constexpr size_t kBootIdBytes = 40;
constexpr size_t kUuidBytes = 16;
// magic, version, senders, stages (4 × u32), slot bytes, total bytes (2 × u64), pid, pad, boot id, GPU uuid, handle.
constexpr size_t kBlobBytes = 16 + 16 + 8 + kBootIdBytes + kUuidBytes + sizeof(cudaIpcMemHandle_t);

core::Result<std::string> gpuUuid(int gpu) {
    cudaDeviceProp prop{};
    const cudaError_t err = cudaGetDeviceProperties(&prop, gpu);
    if (err != cudaSuccess)
        return core::internalError("cuda_ipc: reading cuda:{}'s uuid: {}", gpu, cudaGetErrorString(err));
    return std::string(reinterpret_cast<const char*>(&prop.uuid), kUuidBytes);
}

uint64_t alignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

core::Status cudaStatus(cudaError_t err, std::string_view what) {
    if (err == cudaSuccess) return core::Status::ok();
    return core::internalError("{}: {}", what, cudaGetErrorString(err));
}

template <typename T>
void put(std::string& out, T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

template <typename T>
T get(std::string_view in, size_t& at) {
    T v;
    std::memcpy(&v, in.data() + at, sizeof(T));
    at += sizeof(T);
    return v;
}

}  // namespace

uint64_t InboxLayout::slotOffset(uint32_t channel) const {
    return alignUp(uint64_t{numChannels()} * sizeof(SlotControl), kSlotAlignment) + uint64_t{channel} * slot_bytes;
}

uint64_t InboxLayout::totalBytes() const { return slotOffset(numChannels()); }

core::Result<SlotLayout> slotLayout(const FrameSpec& spec, uint32_t max_rows) {
    if (spec.segments.empty() || spec.segments.size() > static_cast<size_t>(kMaxIpcSegments)) {
        return core::invalidArgument("cuda_ipc frames carry 1..{} segments, this one {}", kMaxIpcSegments,
                                     spec.segments.size());
    }
    SlotLayout l;
    l.count = static_cast<int>(spec.segments.size());
    uint64_t at = 0;
    for (int s = 0; s < l.count; ++s) {
        l.offsets[s] = at;
        l.row_bytes[s] = uint64_t{spec.segments[s].cols} * core::dtypeSize(spec.segments[s].dtype);
        at = alignUp(at + l.row_bytes[s] * max_rows, kSlotAlignment);
    }
    l.bytes = std::max<uint64_t>(at, kSlotAlignment);
    return l;
}

std::string hostBootId() {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string id;
    std::getline(in, id);
    return id.empty() ? std::string("unknown") : id;
}

// ---- LocalInbox ----

core::Result<std::unique_ptr<LocalInbox>> LocalInbox::create(const InboxLayout& layout, int gpu) {
    if (layout.numChannels() == 0 || layout.slot_bytes == 0 || layout.slot_bytes % kSlotAlignment != 0) {
        return core::invalidArgument("cuda_ipc inbox: {} senders × {} stages with {}-byte slots", layout.num_senders,
                                     layout.num_stages, layout.slot_bytes);
    }
    std::unique_ptr<LocalInbox> inbox(new LocalInbox());
    inbox->layout_ = layout;
    inbox->gpu_ = gpu;
    AFD_RETURN_IF_ERROR(cudaStatus(cudaSetDevice(gpu), "cuda_ipc inbox: selecting the GPU"));
    const uint64_t bytes = layout.totalBytes();
    AFD_RETURN_IF_ERROR(cudaStatus(cudaMalloc(&inbox->base_, bytes),
                                   fmt::format("cuda_ipc inbox: allocating {} bytes on cuda:{}", bytes, gpu)));
    // Zero control blocks: no frame delivered on any channel yet.
    AFD_RETURN_IF_ERROR(cudaStatus(cudaMemset(inbox->base_, 0, bytes), "cuda_ipc inbox: zeroing"));
    cudaIpcMemHandle_t handle;
    AFD_RETURN_IF_ERROR(cudaStatus(cudaIpcGetMemHandle(&handle, inbox->base_), "cuda_ipc inbox: exporting"));
    inbox->handle_.assign(reinterpret_cast<const char*>(&handle), sizeof(handle));
    AFD_ASSIGN_OR_RETURN(inbox->uuid_, gpuUuid(gpu));
    return inbox;
}

LocalInbox::~LocalInbox() {
    if (base_ == nullptr) return;
    (void)cudaSetDevice(gpu_);
    const cudaError_t err = cudaFree(base_);
    if (err != cudaSuccess) AFD_LOG_WARN("cuda_ipc inbox: freeing: {}", cudaGetErrorString(err));
}

std::string LocalInbox::exportBlob() const {
    std::string out;
    put<uint32_t>(out, kBlobMagic);
    put<uint32_t>(out, kBlobVersion);
    put<uint32_t>(out, layout_.num_senders);
    put<uint32_t>(out, layout_.num_stages);
    put<uint64_t>(out, layout_.slot_bytes);
    put<uint64_t>(out, layout_.totalBytes());
    put<uint32_t>(out, static_cast<uint32_t>(::getpid()));
    put<uint32_t>(out, 0);
    std::string boot = hostBootId();
    boot.resize(kBootIdBytes, '\0');
    out += boot;
    out += uuid_;
    out += handle_;
    return out;
}

SlotControl* LocalInbox::control(uint32_t channel) const {
    return reinterpret_cast<SlotControl*>(static_cast<uint8_t*>(base_) + layout_.controlOffset(channel));
}

uint8_t* LocalInbox::slot(uint32_t channel) const { return static_cast<uint8_t*>(base_) + layout_.slotOffset(channel); }

// ---- RemoteInbox ----

core::Result<std::unique_ptr<RemoteInbox>> RemoteInbox::open(std::string_view blob, const InboxLayout& expected,
                                                             int gpu, std::string_view peer) {
    if (blob.size() != kBlobBytes) {
        return core::corrupt("{}: its cuda_ipc inbox record has {} bytes, expected {}", peer, blob.size(), kBlobBytes);
    }
    size_t at = 0;
    const auto magic = get<uint32_t>(blob, at);
    const auto version = get<uint32_t>(blob, at);
    if (magic != kBlobMagic || version != kBlobVersion) {
        return core::corrupt("{}: its cuda_ipc inbox record has magic {:#x} version {}, expected {:#x} version {}",
                             peer, magic, version, kBlobMagic, kBlobVersion);
    }
    InboxLayout got;
    got.num_senders = get<uint32_t>(blob, at);
    got.num_stages = get<uint32_t>(blob, at);
    got.slot_bytes = get<uint64_t>(blob, at);
    const auto total = get<uint64_t>(blob, at);
    const auto pid = get<uint32_t>(blob, at);
    at += 4;
    std::string boot(blob.substr(at, kBootIdBytes));
    at += kBootIdBytes;
    boot.resize(std::strlen(boot.c_str()));
    const std::string own_boot = hostBootId();
    if (boot != own_boot) {
        return core::mismatch(
            "{} runs on another host (boot id {}, this rank's {}): cuda_ipc joins ranks of one host; use the nccl or "
            "tcp connector across hosts",
            peer, boot, own_boot);
    }
    if (!(got == expected) || total != expected.totalBytes()) {
        return core::mismatch(
            "{}: its cuda_ipc inbox has {} senders × {} stages of {}-byte slots ({} bytes), this rank expects {} × {} "
            "of {} bytes ({} bytes)",
            peer, got.num_senders, got.num_stages, got.slot_bytes, total, expected.num_senders, expected.num_stages,
            expected.slot_bytes, expected.totalBytes());
    }
    const std::string uuid(blob.substr(at, kUuidBytes));
    at += kUuidBytes;
    AFD_ASSIGN_OR_RETURN(const std::string own_uuid, gpuUuid(gpu));
    cudaIpcMemHandle_t handle;
    std::memcpy(&handle, blob.data() + at, sizeof(handle));
    std::unique_ptr<RemoteInbox> inbox(new RemoteInbox());
    inbox->layout_ = got;
    inbox->gpu_ = gpu;
    inbox->same_gpu_ = uuid == own_uuid;
    AFD_RETURN_IF_ERROR(cudaStatus(cudaSetDevice(gpu), "cuda_ipc: selecting the GPU"));
    const cudaError_t err = cudaIpcOpenMemHandle(&inbox->base_, handle, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
        inbox->base_ = nullptr;
        return core::internalError("{} (pid {}): opening its cuda_ipc inbox on cuda:{}: {}", peer, pid, gpu,
                                   cudaGetErrorString(err));
    }
    return inbox;
}

RemoteInbox::~RemoteInbox() {
    if (base_ == nullptr) return;
    (void)cudaSetDevice(gpu_);
    const cudaError_t err = cudaIpcCloseMemHandle(base_);
    if (err != cudaSuccess) AFD_LOG_WARN("cuda_ipc: closing a peer's inbox: {}", cudaGetErrorString(err));
}

SlotControl* RemoteInbox::control(uint32_t channel) const {
    return reinterpret_cast<SlotControl*>(static_cast<uint8_t*>(base_) + layout_.controlOffset(channel));
}

uint8_t* RemoteInbox::slot(uint32_t channel) const {
    return static_cast<uint8_t*>(base_) + layout_.slotOffset(channel);
}

// ---- DeviceCounters ----

core::Result<std::unique_ptr<DeviceCounters>> DeviceCounters::create(uint32_t num_out, uint32_t num_in, int gpu) {
    std::unique_ptr<DeviceCounters> c(new DeviceCounters());
    c->num_out_ = num_out;
    c->num_in_ = num_in;
    c->gpu_ = gpu;
    const size_t bytes = (size_t{num_out} + num_in) * sizeof(uint64_t) + size_t{num_out} * sizeof(uint32_t) + 16;
    AFD_RETURN_IF_ERROR(cudaStatus(cudaSetDevice(gpu), "cuda_ipc counters: selecting the GPU"));
    AFD_RETURN_IF_ERROR(cudaStatus(cudaMalloc(&c->base_, bytes), "cuda_ipc counters: allocating"));
    AFD_RETURN_IF_ERROR(cudaStatus(cudaMemset(c->base_, 0, bytes), "cuda_ipc counters: zeroing"));
    return c;
}

DeviceCounters::~DeviceCounters() {
    if (base_ == nullptr) return;
    (void)cudaSetDevice(gpu_);
    (void)cudaFree(base_);
}

uint64_t* DeviceCounters::sent(uint32_t out_channel) const { return static_cast<uint64_t*>(base_) + out_channel; }

uint64_t* DeviceCounters::received(uint32_t in_channel) const {
    return static_cast<uint64_t*>(base_) + num_out_ + in_channel;
}

unsigned int* DeviceCounters::ctasDone(uint32_t out_channel) const {
    return reinterpret_cast<unsigned int*>(static_cast<uint64_t*>(base_) + num_out_ + num_in_) + out_channel;
}

uint32_t* DeviceCounters::failed() const {
    return reinterpret_cast<uint32_t*>(static_cast<uint64_t*>(base_) + num_out_ + num_in_) + num_out_;
}

// ---- HostSignals ----

namespace {
uint64_t errorOffset(uint32_t num_peers) { return alignUp(uint64_t{num_peers} * sizeof(uint32_t), 64); }
}  // namespace

core::Result<std::unique_ptr<HostSignals>> HostSignals::create(uint32_t num_peers, int gpu) {
    std::unique_ptr<HostSignals> s(new HostSignals());
    s->num_peers_ = num_peers;
    s->gpu_ = gpu;
    const size_t bytes = errorOffset(num_peers) + sizeof(IpcDeviceError);
    AFD_RETURN_IF_ERROR(cudaStatus(cudaSetDevice(gpu), "cuda_ipc signals: selecting the GPU"));
    AFD_RETURN_IF_ERROR(cudaStatus(cudaHostAlloc(&s->host_, bytes, cudaHostAllocMapped | cudaHostAllocPortable),
                                   "cuda_ipc signals: allocating host-mapped memory"));
    std::memset(s->host_, 0, bytes);
    AFD_RETURN_IF_ERROR(
        cudaStatus(cudaHostGetDevicePointer(&s->device_, s->host_, 0), "cuda_ipc signals: mapping host memory"));
    const size_t mirror_bytes = std::max<size_t>(num_peers, 1) * sizeof(uint32_t);
    AFD_RETURN_IF_ERROR(cudaStatus(cudaMalloc(&s->mirror_, mirror_bytes), "cuda_ipc signals: allocating"));
    AFD_RETURN_IF_ERROR(cudaStatus(cudaMemset(s->mirror_, 0, mirror_bytes), "cuda_ipc signals: zeroing"));
    cudaStream_t stream = nullptr;
    AFD_RETURN_IF_ERROR(
        cudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cuda_ipc signals: creating a stream"));
    s->stream_ = stream;
    return s;
}

HostSignals::~HostSignals() {
    (void)cudaSetDevice(gpu_);
    if (stream_ != nullptr) (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
    if (mirror_ != nullptr) (void)cudaFree(mirror_);
    if (host_ != nullptr) (void)cudaFreeHost(host_);
}

const uint32_t* HostSignals::abortWord(uint32_t peer) const { return static_cast<const uint32_t*>(mirror_) + peer; }

IpcDeviceError* HostSignals::error() const {
    return reinterpret_cast<IpcDeviceError*>(static_cast<uint8_t*>(device_) + errorOffset(num_peers_));
}

void HostSignals::abort(uint32_t peer, IpcAbortReason reason) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto* word = static_cast<uint32_t*>(host_) + peer;
    std::atomic_ref<uint32_t> ref(*word);
    uint32_t none = kAbortNone;
    if (!ref.compare_exchange_strong(none, reason, std::memory_order_seq_cst)) return;
    // The kernels see it in device memory; a failure here leaves the waits to their timeout (logged).
    cudaError_t err = cudaSetDevice(gpu_);
    if (err == cudaSuccess) {
        err = cudaMemcpyAsync(static_cast<uint32_t*>(mirror_) + peer, word, sizeof(uint32_t), cudaMemcpyHostToDevice,
                              static_cast<cudaStream_t>(stream_));
    }
    if (err == cudaSuccess) err = cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
    if (err != cudaSuccess) AFD_LOG_WARN("cuda_ipc: signalling the abort to the device: {}", cudaGetErrorString(err));
}

void HostSignals::abortAll(IpcAbortReason reason) {
    for (uint32_t p = 0; p < num_peers_; ++p) abort(p, reason);
}

uint32_t HostSignals::abortReason(uint32_t peer) const {
    return std::atomic_ref<uint32_t>(static_cast<uint32_t*>(host_)[peer]).load(std::memory_order_seq_cst);
}

IpcDeviceError HostSignals::readError() const {
    IpcDeviceError e;
    std::memcpy(&e, static_cast<const uint8_t*>(host_) + errorOffset(num_peers_), sizeof(e));
    std::atomic_thread_fence(std::memory_order_acquire);
    return e;
}

}  // namespace afd::transport::cuda_ipc
