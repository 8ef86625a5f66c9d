// attention_bench: the paged attention kernels (kernels/paged_attention_cuda.h) on the GPU. Decode: GB/s of KV read
// (batch x context x KV heads x head_dim x 2 tensors x 2 bytes over the time of one call) at every batch and context;
// prefill: TFLOP/s of one causal sequence (2 * 2 * n^2 / 2 * head_dim * heads FLOPs) at every length; both at each
// block size, with the pages of every sequence scattered over the cache (a shuffled block table). Each point is a CUDA
// graph of R calls on rotated inputs (R copies of the cache, chosen so the graph reads more than L2 holds), replayed
// after warm-up; the median replay time over R is the call time. Prints a table and writes a CSV
// (bench/peers/torch_sdpa.py prints the same table for PyTorch SDPA on contiguous KV).
//
// attention_bench [--mode all|decode|prefill] [--batches 1,8,32,64,128,256] [--contexts 1024,4096,8192,16384,32768]
//                 [--tokens 1024,2048,4096,8192,16384] [--block-sizes 16,64] [--heads 32] [--kv-heads 4]
//                 [--head-dim 128] [--reps 50] [--warmup 5] [--rotate-mb 512] [--csv FILE]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention_bench_fill.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/paged_attention_cuda.h"

namespace afd::bench {
namespace {

using kernels::pagedAttentionCuda;
using kernels::PagedAttentionCudaParams;
using kernels::pagedAttentionWorkspaceBytes;

struct Options {
    bool decode = true;
    bool prefill = true;
    std::vector<int> batches = {1, 8, 32, 64, 128, 256};
    std::vector<int> contexts = {1024, 4096, 8192, 16384, 32768};
    std::vector<int> tokens = {1024, 2048, 4096, 8192, 16384};
    std::vector<int> block_sizes = {16, 64};
    int heads = 32;
    int kv_heads = 4;
    int head_dim = 128;
    int reps = 50;
    int warmup = 5;
    double rotate_mb = 512;
    std::string csv;
};

std::vector<int> parseList(const std::string& text) {
    std::vector<int> values;
    size_t start = 0;
    while (start <= text.size()) {
        const size_t comma = text.find(',', start);
        const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (!item.empty()) {
            values.push_back(std::stoi(item));
        }
        if (comma == std::string::npos) {
            break;
        }
        start = comma + 1;
    }
    return values;
}

Options parseOptions(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string flag = argv[i];
        if (i + 1 >= argc) {
            throw std::runtime_error("missing value after " + flag);
        }
        const std::string value = argv[++i];
        if (flag == "--mode") {
            o.decode = value == "all" || value == "decode";
            o.prefill = value == "all" || value == "prefill";
        } else if (flag == "--batches") {
            o.batches = parseList(value);
        } else if (flag == "--contexts") {
            o.contexts = parseList(value);
        } else if (flag == "--tokens") {
            o.tokens = parseList(value);
        } else if (flag == "--block-sizes") {
            o.block_sizes = parseList(value);
        } else if (flag == "--heads") {
            o.heads = std::stoi(value);
        } else if (flag == "--kv-heads") {
            o.kv_heads = std::stoi(value);
        } else if (flag == "--head-dim") {
            o.head_dim = std::stoi(value);
        } else if (flag == "--reps") {
            o.reps = std::stoi(value);
        } else if (flag == "--warmup") {
            o.warmup = std::stoi(value);
        } else if (flag == "--rotate-mb") {
            o.rotate_mb = std::stod(value);
        } else if (flag == "--csv") {
            o.csv = value;
        } else {
            throw std::runtime_error("unknown flag " + flag);
        }
    }
    return o;
}

// One cudaMalloc allocation (never empty: the kernels reject null pointers).
class DeviceArray {
public:
    explicit DeviceArray(size_t bytes) { AFD_CUDA_CHECK(cudaMalloc(&ptr_, std::max<size_t>(bytes, 256))); }
    ~DeviceArray() { (void)cudaFree(ptr_); }
    DeviceArray(const DeviceArray&) = delete;
    DeviceArray& operator=(const DeviceArray&) = delete;
    template <typename T>
    T* as() const {
        return static_cast<T*>(ptr_);
    }

private:
    void* ptr_ = nullptr;
};

template <typename T>
void upload(const DeviceArray& dst, const std::vector<T>& src) {
    AFD_CUDA_CHECK(cudaMemcpy(dst.as<void>(), src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice));
}

// Median microseconds of one call: `enqueue(r)` for r in [0, rotations) captured into one graph, replayed `warmup`
// times, then `reps` times between events.
double timeCalls(cudaStream_t stream, int rotations, const std::function<void(int)>& enqueue, int warmup, int reps) {
    for (int r = 0; r < rotations; ++r) {
        enqueue(r);  // eager once: kernel attributes are set outside the capture
    }
    AFD_CUDA_CHECK(cudaStreamSynchronize(stream));
    cudaGraph_t graph = nullptr;
    AFD_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int r = 0; r < rotations; ++r) {
        enqueue(r);
    }
    AFD_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec = nullptr;
    AFD_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    AFD_CUDA_CHECK(cudaGraphDestroy(graph));
    for (int i = 0; i < warmup; ++i) {
        AFD_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    }
    std::vector<cudaEvent_t> events(static_cast<size_t>(2 * reps));
    for (auto& e : events) {
        AFD_CUDA_CHECK(cudaEventCreate(&e));
    }
    for (int i = 0; i < reps; ++i) {
        AFD_CUDA_CHECK(cudaEventRecord(events[static_cast<size_t>(2 * i)], stream));
        AFD_CUDA_CHECK(cudaGraphLaunch(exec, stream));
        AFD_CUDA_CHECK(cudaEventRecord(events[static_cast<size_t>(2 * i + 1)], stream));
    }
    AFD_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<double> us;
    for (int i = 0; i < reps; ++i) {
        float ms = 0.0f;
        AFD_CUDA_CHECK(
            cudaEventElapsedTime(&ms, events[static_cast<size_t>(2 * i)], events[static_cast<size_t>(2 * i + 1)]));
        us.push_back(1000.0 * ms / rotations);
    }
    for (auto& e : events) {
        AFD_CUDA_CHECK(cudaEventDestroy(e));
    }
    AFD_CUDA_CHECK(cudaGraphExecDestroy(exec));
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
}

struct Row {
    std::string kind;
    int block_size = 0;
    int batch = 0;
    int context = 0;  // decode: KV length; prefill: the sequence's tokens
    int rotations = 0;
    double us = 0.0;
    double gbps = 0.0;
    double tflops = 0.0;
};

// One point: `batch` chunks of `rows` query rows over `context` cached tokens each, R rotations of the cache.
Row runPoint(const Options& o, bool decode, int batch, int context, int block_size, cudaStream_t stream) {
    const int rows = decode ? 1 : context;
    const int blocks_per_seq = (context + block_size - 1) / block_size;
    const double kv_bytes = 2.0 * 2.0 * batch * static_cast<double>(context) * o.kv_heads * o.head_dim;
    const double q_bytes = 2.0 * 2.0 * batch * static_cast<double>(rows) * o.heads * o.head_dim;  // q and out
    const int max_rotations = decode ? 128 : 16;
    const int rotations =
        std::clamp(static_cast<int>(std::ceil(o.rotate_mb * 1e6 / (kv_bytes + q_bytes))), 1, max_rotations);
    const size_t pool_blocks = static_cast<size_t>(rotations) * batch * blocks_per_seq;
    const size_t cache_elements = pool_blocks * block_size * o.kv_heads * o.head_dim;
    const size_t q_elements = static_cast<size_t>(batch) * rows * o.heads * o.head_dim;
    DeviceArray k(cache_elements * 2);
    DeviceArray v(cache_elements * 2);
    DeviceArray q(q_elements * 2);
    DeviceArray out(q_elements * 2);
    AFD_CUDA_CHECK(fillUniformBf16(k.as<uint16_t>(), cache_elements, 1, 1.0f, stream));
    AFD_CUDA_CHECK(fillUniformBf16(v.as<uint16_t>(), cache_elements, 2, 1.0f, stream));
    AFD_CUDA_CHECK(fillUniformBf16(q.as<uint16_t>(), q_elements, 3, 2.0f, stream));

    std::vector<int32_t> q_start(static_cast<size_t>(batch) + 1);
    for (int i = 0; i <= batch; ++i) {
        q_start[static_cast<size_t>(i)] = i * rows;
    }
    const std::vector<int32_t> seq_len(static_cast<size_t>(batch), context);
    std::vector<int32_t> pages(pool_blocks);
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), std::mt19937(7));
    DeviceArray d_q_start(q_start.size() * 4);
    DeviceArray d_seq_len(seq_len.size() * 4);
    DeviceArray d_tables(pages.size() * 4);  // rotation r: rows [r * batch, (r + 1) * batch)
    upload(d_q_start, q_start);
    upload(d_seq_len, seq_len);
    upload(d_tables, pages);
    const size_t ws_bytes = pagedAttentionWorkspaceBytes(batch, rows, o.heads, o.head_dim, context);
    DeviceArray workspace(ws_bytes);

    PagedAttentionCudaParams p;
    p.num_seqs = batch;
    p.num_heads = o.heads;
    p.num_kv_heads = o.kv_heads;
    p.head_dim = o.head_dim;
    p.block_size = block_size;
    p.scale = 1.0f / std::sqrt(static_cast<float>(o.head_dim));
    p.q = q.as<uint16_t>();
    p.k_cache = k.as<uint16_t>();
    p.v_cache = v.as<uint16_t>();
    p.q_start = d_q_start.as<int32_t>();
    p.seq_len = d_seq_len.as<int32_t>();
    p.max_blocks_per_seq = blocks_per_seq;
    p.out = out.as<uint16_t>();
    p.max_q_len = rows;
    p.max_seq_len = context;
    p.workspace = workspace.as<void>();
    p.workspace_bytes = ws_bytes;
    auto enqueue = [&](int r) {
        PagedAttentionCudaParams call = p;
        call.block_tables = d_tables.as<int32_t>() + static_cast<size_t>(r) * batch * blocks_per_seq;
        pagedAttentionCuda(call, stream);
    };
    Row row;
    row.kind = decode ? "decode" : "prefill";
    row.block_size = block_size;
    row.batch = batch;
    row.context = context;
    row.rotations = rotations;
    row.us = timeCalls(stream, rotations, enqueue, o.warmup, o.reps);
    row.gbps = kv_bytes / (row.us * 1e-6) / 1e9;
    row.tflops =
        decode ? 0.0 : 2.0 * context * static_cast<double>(context) * o.head_dim * o.heads / (row.us * 1e-6) / 1e12;
    return row;
}

int run(int argc, char** argv) {
    const Options o = parseOptions(argc, argv);
    cudaDeviceProp prop{};
    AFD_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    cudaStream_t stream = nullptr;
    AFD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    std::printf("paged attention on %s: %d q / %d kv heads, head_dim %d; pages shuffled; graph of R rotated calls\n",
                prop.name, o.heads, o.kv_heads, o.head_dim);
    std::printf("%-8s %5s %6s %8s %4s %11s %9s %9s\n", "kind", "bs", "batch", "context", "R", "us", "GB/s", "TFLOP/s");
    std::vector<Row> rows;
    auto report = [&](const Row& r) {
        std::printf("%-8s %5d %6d %8d %4d %11.2f %9.1f %9.1f\n", r.kind.c_str(), r.block_size, r.batch, r.context,
                    r.rotations, r.us, r.gbps, r.tflops);
        std::fflush(stdout);
        rows.push_back(r);
    };
    for (int bs : o.block_sizes) {
        if (o.decode) {
            for (int batch : o.batches) {
                for (int context : o.contexts) {
                    report(runPoint(o, true, batch, context, bs, stream));
                }
            }
        }
        if (o.prefill) {
            for (int tokens : o.tokens) {
                report(runPoint(o, false, 1, tokens, bs, stream));
            }
        }
    }
    AFD_CUDA_CHECK(cudaStreamDestroy(stream));
    if (!o.csv.empty()) {
        std::ofstream csv(o.csv);
        csv << "impl,kind,block_size,batch,context,rotations,median_us,gbps,tflops,device\n";
        for (const Row& r : rows) {
            csv << "afd," << r.kind << ',' << r.block_size << ',' << r.batch << ',' << r.context << ',' << r.rotations
                << ',' << r.us << ',' << r.gbps << ',' << r.tflops << ',' << prop.name << '\n';
        }
    }
    return 0;
}

}  // namespace
}  // namespace afd::bench

int main(int argc, char** argv) {
    try {
        return afd::bench::run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "attention_bench: %s\n", e.what());
        return 1;
    }
}
