#include "lab/gemm_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>

#include "core/check.h"
#include "core/logging.h"
#include "kernels/cuda/blas/cublaslt_gemm.h"
#include "kernels/cuda/cuda_check.h"
#include "lab/bench_timing.h"

namespace afd::lab {
namespace {

using kernels::cuda::CublasLtGemm;
using kernels::cuda::GemmCandidate;
using kernels::cuda::GemmOutDType;
using kernels::cuda::GemmParams;

struct Timed {
    GemmCandidate candidate;
    double us = 0;
};

// The device buffers of one shape: `copies` weight copies, x and y sized for the largest M.
struct ShapeBuffers {
    std::vector<std::unique_ptr<DeviceMemory>> weights;
    std::unique_ptr<DeviceMemory> x;
    std::unique_ptr<DeviceMemory> y;
};

GemmParams paramsFor(const GemmBenchShape& s, int64_t m, const ShapeBuffers& b, size_t copy) {
    GemmParams p;
    p.m = m;
    p.n = s.n;
    p.k = s.k;
    p.x = static_cast<const core::Bf16*>(b.x->get());
    p.ldx = s.k;
    p.w = static_cast<const core::Bf16*>(b.weights[copy]->get());
    p.y = b.y->get();
    p.ldy = s.n;
    p.out_dtype = s.f32_out ? GemmOutDType::kF32 : GemmOutDType::kBf16;
    return p;
}

// Row 0 of y after `c` ran at M = m on x (bytes of the row).
std::vector<uint8_t> rowZero(CublasLtGemm& gemm, const GemmBenchShape& s, int64_t m, const ShapeBuffers& b,
                             const GemmCandidate& c, cudaStream_t stream) {
    const size_t row_bytes = static_cast<size_t>(s.n) * (s.f32_out ? 4 : 2);
    AFD_CUDA_CHECK(cudaMemsetAsync(b.y->get(), 0xff, row_bytes, stream));
    gemm.matmulWith(paramsFor(s, m, b, 0), c, stream);
    std::vector<uint8_t> row(row_bytes);
    AFD_CUDA_CHECK(cudaMemcpyAsync(row.data(), b.y->get(), row_bytes, cudaMemcpyDeviceToHost, stream));
    AFD_CUDA_CHECK(cudaStreamSynchronize(stream));
    return row;
}

}  // namespace

GemmBenchResult runGemmBench(const GemmBenchOptions& o) {
    AFD_CHECK(deviceCount() > 0, "bench gemm: no CUDA device");
    AFD_CUDA_CHECK(cudaSetDevice(0));
    Stream stream;
    GemmBenchResult result = startBenchResult<GemmBenchRow>(stream.get(), o.warmup_ms);
    CublasLtGemm gemm(0);
    const int64_t max_m = std::max(*std::max_element(o.rows.begin(), o.rows.end()), o.reference_rows);
    for (const GemmBenchShape& s : o.shapes) {
        const size_t weight_bytes = static_cast<size_t>(s.n * s.k) * 2;
        const auto copies = static_cast<size_t>(
            std::clamp<int64_t>((o.rotate_mib << 20) / static_cast<int64_t>(weight_bytes) + 1, 2, 16));
        ShapeBuffers b;
        for (size_t c = 0; c < copies; ++c) {
            b.weights.push_back(std::make_unique<DeviceMemory>(weight_bytes));
            fillRandom(b.weights.back()->get(), weight_bytes / 2, o.seed + c, 1.0f / std::sqrt(float(s.k)),
                       stream.get());
        }
        b.x = std::make_unique<DeviceMemory>(static_cast<size_t>(max_m * s.k) * 2);
        fillRandom(b.x->get(), static_cast<size_t>(max_m * s.k), o.seed + 1000, 1.0f, stream.get());
        b.y = std::make_unique<DeviceMemory>(static_cast<size_t>(max_m * s.n) * 4);
        // kind -> (m -> the fastest candidate of that kind), for the bit-for-bit checks
        std::map<std::string, std::map<int64_t, GemmCandidate>> fastest;
        std::vector<int64_t> ms = o.rows;
        if (std::find(ms.begin(), ms.end(), o.reference_rows) == ms.end()) ms.push_back(o.reference_rows);
        for (const int64_t m : ms) {
            const GemmParams shape_params = paramsFor(s, m, b, 0);
            const std::vector<GemmCandidate> all = gemm.candidates(shape_params.shape(), o.splits);
            std::vector<GemmCandidate> runnable;
            std::vector<std::unique_ptr<Graph>> graphs;
            for (const GemmCandidate& c : all) {
                try {
                    graphs.push_back(std::make_unique<Graph>(stream.get(), [&] {
                        for (size_t w = 0; w < copies; ++w) gemm.matmulWith(paramsFor(s, m, b, w), c, stream.get());
                    }));
                    runnable.push_back(c);
                } catch (const core::Error& e) {
                    AFD_LOG_DEBUG("bench gemm {} M {}: {} does not run: {}", s.name, m, c.info.toString(), e.what());
                    (void)cudaGetLastError();
                }
            }
            AFD_CHECK(!runnable.empty(), "bench gemm {} M {}: no algorithm runs", s.name, m);
            const std::vector<Timing> t = timeInterleaved(
                stream.get(), o.warmup, o.reps, graphs.size(), [&](int, size_t c) { graphs[c]->launch(stream.get()); },
                o.warmup_ms);
            std::vector<Timed> timed;
            for (size_t c = 0; c < runnable.size(); ++c) {
                timed.push_back({runnable[c], t[c].median_us / static_cast<double>(copies)});
            }
            const double bytes = static_cast<double>(weight_bytes) + static_cast<double>(m * s.k) * 2 +
                                 static_cast<double>(m * s.n) * (s.f32_out ? 4 : 2);
            const double mem_floor_us = bytes / (result.copy_tbps * 1e12) * 1e6;  // as the other benchmarks state it
            const double flop_floor_us = 2.0 * static_cast<double>(m * s.n * s.k) / (result.gemm_tflops * 1e12) * 1e6;
            const double floor_us = std::max(mem_floor_us, flop_floor_us);
            const auto emit = [&](const std::string& kind, const std::optional<Timed>& best) {
                if (!best) return;
                fastest[kind][m] = best->candidate;
                if (std::find(o.rows.begin(), o.rows.end(), m) == o.rows.end()) return;  // the reference M only
                GemmBenchRow row;
                row.shape = s.name;
                row.n = s.n;
                row.k = s.k;
                row.m = m;
                row.kind = kind;
                row.algo = best->candidate.info.toString();
                row.candidates = static_cast<int>(runnable.size());
                row.median_us = best->us;
                row.floor_us = floor_us;
                row.pct_of_floor = 100.0 * floor_us / best->us;
                row.read_tbps = bytes / (best->us * 1e-6) / 1e12;
                result.rows.push_back(row);
            };
            const auto best_of = [&](auto&& keep) {
                std::optional<Timed> best;
                for (const Timed& x : timed) {
                    if (keep(x.candidate) && (!best || x.us < best->us)) best = x;
                }
                return best;
            };
            // The engine's rule: the first batch-invariant heuristic result, no-workspace ones first (candidates()
            // keeps that order).
            std::optional<Timed> engine;
            for (const Timed& x : timed) {
                if (x.candidate.batch_invariant && !x.candidate.forced_split) {
                    engine = x;
                    break;
                }
            }
            emit("engine", engine);
            emit("best_invariant", best_of([](const GemmCandidate& c) { return c.batch_invariant; }));
            for (const int split : o.splits) {
                emit(fmt::format("split{}", split),
                     best_of([&](const GemmCandidate& c) { return c.forced_split && c.info.split_k == split; }));
            }
            emit("best_any", best_of([](const GemmCandidate&) { return true; }));
        }
        // Bit for bit: row 0 at M = 1 against row 0 at the reference M, each kind with its own fastest algorithm.
        for (GemmBenchRow& row : result.rows) {
            if (row.shape != s.name || row.m != 1) continue;
            const auto& per_m = fastest[row.kind];
            if (!per_m.contains(1) || !per_m.contains(o.reference_rows)) continue;
            const auto one = rowZero(gemm, s, 1, b, per_m.at(1), stream.get());
            const auto ref = rowZero(gemm, s, o.reference_rows, b, per_m.at(o.reference_rows), stream.get());
            row.bitwise = one == ref ? "equal" : "differs";
        }
    }
    return result;
}

}  // namespace afd::lab
