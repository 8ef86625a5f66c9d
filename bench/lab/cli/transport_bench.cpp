#include "lab/cli/transport_bench.h"

#if defined(AFD_HAVE_CUDA)

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>

#include "core/child_process.h"
#include "core/logging.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/device_memory.h"
#include "transport/afd_wire.h"
#include "transport/connector_factory.h"
#include "transport/socket.h"

namespace afd::lab {
namespace {

using kernels::cuda::DeviceBuffer;
using kernels::cuda::Event;
using kernels::cuda::Stream;

int64_t maxTokens(const TransportBenchOptions& o) { return *std::max_element(o.tokens.begin(), o.tokens.end()); }

core::Result<transport::ConnectorRequest> requestFor(const TransportBenchOptions& o, transport::Role role) {
    const std::string json = fmt::format(
        R"({{"role":"{}","connector":"{}","host":"127.0.0.1","port":{},"num_attention_ranks":1,"num_ffn_ranks":1,)"
        R"("compute_gate_on_attention":true,"max_num_tokens":{},"connect_timeout_s":{},"step_timeout_s":{}}})",
        transport::roleName(role), o.connector, o.port, maxTokens(o), static_cast<int64_t>(o.timeout_s),
        static_cast<int64_t>(o.timeout_s));
    AFD_ASSIGN_OR_RETURN(transport::AfdConfig afd, transport::AfdConfig::fromJson(json, role, "bench transport"));
    transport::ConnectorRequest r;
    r.afd = afd;
    r.role = role;
    r.rank = 0;
    r.device = core::Device::cuda(o.gpu);
    r.model_fingerprint = fmt::format("bench-transport H{} K{}", o.hidden, o.top_k);
    r.hidden_size = o.hidden;
    r.experts_per_token = o.top_k;
    return r;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

double percentile(std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
}

// The peer: per crossing, device-to-device copies of the A2F and the F2A frame's bytes within this process, each
// followed by an 8-byte write (the flag), on one stream; median microseconds per crossing over the timed steps.
double localCrossingUs(const TransportBenchOptions& o, int64_t T, const DeviceBuffer& a2f_src,
                       const DeviceBuffer& f2a_src, cudaStream_t s) {
    const uint64_t a2f_bytes =
        static_cast<uint64_t>(T) * transport::deviceM2nDispatchSpec(o.hidden, o.top_k).rowBytes();
    const uint64_t f2a_bytes = static_cast<uint64_t>(T) * transport::hiddenSpec(o.hidden).rowBytes();
    DeviceBuffer a2f_dst(a2f_src.bytes()), f2a_dst(f2a_src.bytes()), flags(64);
    Event begin(true), end(true);
    std::vector<double> per_crossing;
    for (int step = 0; step < o.warmup_steps + o.steps; ++step) {
        AFD_CUDA_CHECK(cudaEventRecord(begin.get(), s));
        for (int l = 0; l < o.layers; ++l) {
            AFD_CUDA_CHECK(cudaMemcpyAsync(a2f_dst.get(), a2f_src.get(), a2f_bytes, cudaMemcpyDeviceToDevice, s));
            AFD_CUDA_CHECK(cudaMemsetAsync(flags.get(), l & 0xff, 8, s));
            AFD_CUDA_CHECK(cudaMemcpyAsync(f2a_dst.get(), f2a_src.get(), f2a_bytes, cudaMemcpyDeviceToDevice, s));
            AFD_CUDA_CHECK(cudaMemsetAsync(flags.as<uint8_t>() + 8, l & 0xff, 8, s));
        }
        AFD_CUDA_CHECK(cudaEventRecord(end.get(), s));
        AFD_CUDA_CHECK(cudaEventSynchronize(end.get()));
        float ms = 0;
        AFD_CUDA_CHECK(cudaEventElapsedTime(&ms, begin.get(), end.get()));
        if (step >= o.warmup_steps) per_crossing.push_back(1e3 * ms / o.layers);
    }
    return median(per_crossing);
}

}  // namespace

core::Status serveTransportBench(const TransportBenchOptions& o) {
    AFD_ASSIGN_OR_RETURN(const transport::ConnectorRequest request, requestFor(o, transport::Role::kFfn));
    AFD_CUDA_CHECK(cudaSetDevice(o.gpu));
    AFD_ASSIGN_OR_RETURN(std::unique_ptr<transport::FfnConnector> connector, transport::makeFfnConnector(request));
    const int64_t T_max = maxTokens(o);
    DeviceBuffer out(static_cast<size_t>(T_max * o.hidden) * sizeof(float));
    AFD_CUDA_CHECK(cudaMemset(out.get(), 0, out.bytes()));
    Stream stream;
    const transport::FrameSpec a2f = transport::deviceM2nDispatchSpec(o.hidden, o.top_k);
    const bool active[1] = {true};
    for (;;) {
        AFD_ASSIGN_OR_RETURN(const transport::StepInfo info, connector->receiveStep());
        if (info.all_left) break;
        const uint32_t rows[1] = {info.peers[0].stage_tokens[0]};
        std::vector<transport::FramePayload> payloads(1);
        payloads[0].rows = rows[0];
        payloads[0].segments = {
            core::Tensor::view(out.get(), core::DType::kF32, {rows[0], o.hidden}, core::Device::cuda(o.gpu))};
        for (int l = 0; l < o.layers; ++l) {
            const transport::FrameKey key{info.step, static_cast<uint32_t>(l), 0};
            AFD_RETURN_IF_ERROR(connector->postReceive(key, a2f, active, rows, stream.get()).status());
            AFD_RETURN_IF_ERROR(connector->postSend(key, payloads, active, stream.get()));
        }
        AFD_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
        AFD_RETURN_IF_ERROR(connector->deviceStatus());
    }
    connector->close();
    return core::Status::ok();
}

core::Result<TransportBenchResult> runTransportBench(const TransportBenchOptions& options) {
    TransportBenchOptions o = options;
    if (o.port == 0) {
        AFD_ASSIGN_OR_RETURN(o.port, transport::pickServerPort("127.0.0.1"));
    }
    TransportBenchResult result;
    result.device = kernels::cuda::deviceInfo(o.gpu).name;
    result.connector = o.connector;
    const char* pipe_dir = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
    result.mps =
        std::filesystem::exists(std::filesystem::path(pipe_dir != nullptr ? pipe_dir : "/tmp/nvidia-mps") / "control");
    if (!result.mps) {
        AFD_LOG_WARN("bench transport: no MPS control daemon found: the two processes' contexts time-slice the GPU");
    }
    // The FFN half: this binary again.
    core::ChildProcess::Spec spec;
    spec.argv = {std::filesystem::read_symlink("/proc/self/exe").string(),
                 "bench",
                 "transport",
                 "--role",
                 "ffn",
                 "--connector",
                 o.connector,
                 "--port",
                 std::to_string(o.port),
                 "--layers",
                 std::to_string(o.layers),
                 "--hidden",
                 std::to_string(o.hidden),
                 "--top-k",
                 std::to_string(o.top_k),
                 "--gpu",
                 std::to_string(o.gpu),
                 "--tokens",
                 fmt::format("{}", fmt::join(o.tokens, ","))};
    AFD_ASSIGN_OR_RETURN(core::ChildProcess child, core::ChildProcess::spawn(spec));
    AFD_ASSIGN_OR_RETURN(const transport::ConnectorRequest request, requestFor(o, transport::Role::kAttention));
    AFD_CUDA_CHECK(cudaSetDevice(o.gpu));
    AFD_ASSIGN_OR_RETURN(std::unique_ptr<transport::AttentionConnector> connector,
                         transport::makeAttentionConnector(request));
    const int64_t T_max = maxTokens(o);
    const int64_t H = o.hidden;
    const int64_t K = o.top_k;
    DeviceBuffer x(static_cast<size_t>(T_max * H) * sizeof(uint16_t));
    DeviceBuffer ids(static_cast<size_t>(T_max * K) * sizeof(int32_t));
    DeviceBuffer weights(static_cast<size_t>(T_max * K) * sizeof(float));
    AFD_CUDA_CHECK(cudaMemset(x.get(), 0, x.bytes()));
    AFD_CUDA_CHECK(cudaMemset(ids.get(), 0xff, ids.bytes()));
    AFD_CUDA_CHECK(cudaMemset(weights.get(), 0, weights.bytes()));
    // The local peer's sources: one A2F frame's bytes back to back, one F2A frame's.
    DeviceBuffer a2f_src(static_cast<size_t>(T_max) * (H * 2 + K * 8));
    DeviceBuffer f2a_src(static_cast<size_t>(T_max * H) * sizeof(float));
    Stream stream;
    Event begin(true), end(true);
    uint64_t step = 0;
    const core::Device device = core::Device::cuda(o.gpu);
    for (const int64_t T : o.tokens) {
        std::vector<transport::FramePayload> payloads(1);
        payloads[0].rows = static_cast<uint32_t>(T);
        payloads[0].segments = {core::Tensor::view(x.get(), core::DType::kBf16, {T, H}, device),
                                core::Tensor::view(ids.get(), core::DType::kI32, {T, K}, device),
                                core::Tensor::view(weights.get(), core::DType::kF32, {T, K}, device)};
        const uint32_t rows[1] = {static_cast<uint32_t>(T)};
        std::vector<double> per_crossing;
        for (int s = 0; s < o.warmup_steps + o.steps; ++s) {
            transport::StepHeader header;
            header.step = step;
            header.stage_tokens[0] = static_cast<uint32_t>(T);
            AFD_RETURN_IF_ERROR(connector->sendStep(header));
            AFD_CUDA_CHECK(cudaEventRecord(begin.get(), stream.get()));
            for (int l = 0; l < o.layers; ++l) {
                const transport::FrameKey key{step, static_cast<uint32_t>(l), 0};
                AFD_RETURN_IF_ERROR(connector->postDispatch(key, payloads, stream.get()));
                AFD_RETURN_IF_ERROR(connector->postCombine(key, transport::hiddenSpec(H), rows, stream.get()).status());
            }
            AFD_CUDA_CHECK(cudaEventRecord(end.get(), stream.get()));
            AFD_CUDA_CHECK(cudaEventSynchronize(end.get()));
            AFD_RETURN_IF_ERROR(connector->deviceStatus());
            float ms = 0;
            AFD_CUDA_CHECK(cudaEventElapsedTime(&ms, begin.get(), end.get()));
            if (s >= o.warmup_steps) per_crossing.push_back(1e3 * ms / o.layers);
            ++step;
        }
        TransportBenchRow row;
        row.tokens = T;
        row.a2f_bytes = static_cast<uint64_t>(T) * transport::deviceM2nDispatchSpec(H, K).rowBytes();
        row.f2a_bytes = static_cast<uint64_t>(T) * transport::hiddenSpec(H).rowBytes();
        row.afd_us = median(per_crossing);
        row.afd_p10_us = percentile(per_crossing, 0.1);
        row.afd_p90_us = percentile(per_crossing, 0.9);
        row.local_us = localCrossingUs(o, T, a2f_src, f2a_src, stream.get());
        AFD_LOG_INFO("bench transport: T {}: {:.2f} us per crossing ({:.2f} us within one process)", T, row.afd_us,
                     row.local_us);
        result.rows.push_back(row);
    }
    transport::StepHeader bye;
    bye.step = step;
    bye.flags = transport::kStepShutdown;
    AFD_RETURN_IF_ERROR(connector->sendStep(bye));
    connector->close();
    const std::optional<int> code = child.wait(std::chrono::seconds(30));
    if (!code || *code != 0) {
        return core::internalError("bench transport: the FFN process {}",
                                   code ? fmt::format("exited with {}", *code) : std::string("did not exit"));
    }
    return result;
}

}  // namespace afd::lab

#endif  // AFD_HAVE_CUDA
