#include "kernels/cuda/blas/cublaslt_gemm.h"

#include <cublasLt.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <utility>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_memory.h"

namespace afd::kernels::cuda {
namespace {

constexpr int kHeuristicResults = 32;
constexpr uint32_t kOperandAlignmentBytes = 16;  // what checkGemmParams guarantees of every pointer

cudaDataType_t cudaOutType(GemmOutDType dtype) { return dtype == GemmOutDType::kBf16 ? CUDA_R_16BF : CUDA_R_32F; }
int64_t outElementBytes(GemmOutDType dtype) { return dtype == GemmOutDType::kBf16 ? 2 : 4; }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// RAII of the cuBLASLt descriptors a shape keeps.
struct MatmulDesc {
    cublasLtMatmulDesc_t get = nullptr;
    MatmulDesc() { AFD_CUBLAS_CHECK(cublasLtMatmulDescCreate(&get, CUBLAS_COMPUTE_32F, CUDA_R_32F)); }
    ~MatmulDesc() {
        if (get != nullptr) (void)cublasLtMatmulDescDestroy(get);
    }
    MatmulDesc(const MatmulDesc&) = delete;
    MatmulDesc& operator=(const MatmulDesc&) = delete;
};

struct Layout {
    cublasLtMatrixLayout_t get = nullptr;
    Layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld) {
        AFD_CUBLAS_CHECK(
            cublasLtMatrixLayoutCreate(&get, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
    }
    ~Layout() {
        if (get != nullptr) (void)cublasLtMatrixLayoutDestroy(get);
    }
    Layout(const Layout&) = delete;
    Layout& operator=(const Layout&) = delete;
};

struct Preference {
    cublasLtMatmulPreference_t get = nullptr;
    explicit Preference(uint64_t max_workspace) {
        AFD_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&get));
        set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, max_workspace);
        for (const auto attr :
             {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
              CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
            set(attr, kOperandAlignmentBytes);
        }
    }
    ~Preference() {
        if (get != nullptr) (void)cublasLtMatmulPreferenceDestroy(get);
    }
    Preference(const Preference&) = delete;
    Preference& operator=(const Preference&) = delete;
    template <typename T>
    void set(cublasLtMatmulPreferenceAttributes_t attr, T value) {
        AFD_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(get, attr, &value, sizeof(value)));
    }
};

// The descriptors of one shape. cuBLASLt is column-major: y^T [N, M] = w (stored [K, N], transposed) · x^T [K, M],
// so w is A with op T (the "TN" GEMM), x is B, y is C and D.
struct Descriptors {
    MatmulDesc op;
    Layout a, b, d;
    explicit Descriptors(const GemmShape& s)
        : a(CUDA_R_16BF, s.k, s.n, s.k), b(CUDA_R_16BF, s.k, s.m, s.ldx), d(cudaOutType(s.out_dtype), s.n, s.m, s.ldy) {
        const cublasOperation_t transa = CUBLAS_OP_T;
        const cublasOperation_t transb = CUBLAS_OP_N;
        AFD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.get, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof(transa)));
        AFD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.get, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof(transb)));
        if (s.bias) {  // a vector of y's dtype (BF16: checkGemmShape), added per output feature
            const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
            AFD_CUBLAS_CHECK(
                cublasLtMatmulDescSetAttribute(op.get, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
        }
    }
};

template <typename T>
T configAttribute(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
    T value{};
    size_t written = 0;
    AFD_CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof(value), &written));
    return value;
}

GemmAlgoInfo describeAlgo(const cublasLtMatmulHeuristicResult_t& result) {
    const cublasLtMatmulAlgo_t& algo = result.algo;
    GemmAlgoInfo info;
    info.algo_id = configAttribute<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID);
    info.tile_id = configAttribute<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID);
    info.stages_id = configAttribute<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID);
    info.split_k = configAttribute<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
    info.reduction_scheme = configAttribute<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
    info.cta_swizzling = configAttribute<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING);
    info.custom_option = configAttribute<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION);
    info.inner_shape_id = configAttribute<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID);
    info.cluster_shape_id = configAttribute<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID);
    size_t written = 0;
    AFD_CUBLAS_CHECK(cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_NUMERICAL_IMPL_FLAGS,
                                                       &info.numerical_impl_flags, sizeof(info.numerical_impl_flags),
                                                       &written));
    info.workspace_bytes = result.workspaceSize;
    info.waves = result.wavesCount;
    return info;
}

// One pass over K inside each tile, on tensor cores accumulating in FP32 (the class header's rules).
bool batchInvariant(const GemmAlgoInfo& info) {
    const uint64_t flags = info.numerical_impl_flags;
    const uint64_t accumulator = flags & CUBLASLT_NUMERICAL_IMPL_FLAGS_ACCUMULATOR_TYPE_MASK;
    return info.split_k <= 1 && info.reduction_scheme == CUBLASLT_REDUCTION_SCHEME_NONE &&
           (flags & CUBLASLT_NUMERICAL_IMPL_FLAGS_HMMA) != 0 && (flags & CUBLASLT_NUMERICAL_IMPL_FLAGS_FMA) == 0 &&
           accumulator == CUBLASLT_NUMERICAL_IMPL_FLAGS_ACCUMULATOR_32F;
}

struct Plan {
    std::unique_ptr<Descriptors> desc;
    cublasLtMatmulAlgo_t algo{};
    GemmAlgoInfo info;
};

}  // namespace

const char* gemmOutDTypeName(GemmOutDType dtype) { return dtype == GemmOutDType::kBf16 ? "bf16" : "f32"; }

std::string GemmShape::toString() const {
    return fmt::format("M {} N {} K {} ldx {} ldy {} out {}{}", m, n, k, ldx, ldy, gemmOutDTypeName(out_dtype),
                       bias ? " +bias" : "");
}

std::string GemmAlgoInfo::toString() const {
    return fmt::format(
        "algo {} tile {} stages {} split-k {} reduction {} swizzle {} custom {} inner {} cluster {} impl {:#x} "
        "workspace {} waves {:.2f} ({} of {} heuristic results refused){}",
        algo_id, tile_id, stages_id, split_k, reduction_scheme, cta_swizzling, custom_option, inner_shape_id,
        cluster_shape_id, numerical_impl_flags, workspace_bytes, waves, rejected, candidates,
        borrowed_from_m > 0 ? fmt::format(", the algorithm of M {}", borrowed_from_m) : "");
}

void checkGemmShape(const GemmShape& s) {
    AFD_CHECK(s.m >= 0 && s.n >= 1 && s.k >= 1, "GEMM {}: M must be >= 0, N and K >= 1", s.toString());
    AFD_CHECK(s.k % 8 == 0, "GEMM {}: K must be a multiple of 8 (rows of x and w on 16 bytes)", s.toString());
    AFD_CHECK(s.ldx >= s.k && s.ldx % 8 == 0, "GEMM {}: ldx must be >= K and a multiple of 8 (rows of x on 16 bytes)",
              s.toString());
    const int64_t row_multiple = 16 / outElementBytes(s.out_dtype);
    AFD_CHECK(s.ldy >= s.n && s.ldy % row_multiple == 0,
              "GEMM {}: ldy must be >= N and a multiple of {} ({} rows of y on 16 bytes)", s.toString(), row_multiple,
              gemmOutDTypeName(s.out_dtype));
    AFD_CHECK(!s.bias || s.out_dtype == GemmOutDType::kBf16,
              "GEMM {}: a bias needs BF16 y (cuBLASLt's bias vector has y's dtype)", s.toString());
}

void checkGemmParams(const GemmParams& p) {
    const GemmShape s = p.shape();
    checkGemmShape(s);
    if (s.m == 0) return;
    AFD_CHECK(p.x != nullptr && p.w != nullptr && p.y != nullptr, "GEMM {}: null x, w or y", s.toString());
    AFD_CHECK(aligned16(p.x) && aligned16(p.w) && aligned16(p.y) && aligned16(p.bias),
              "GEMM {}: x {}, w {}, y {} and bias {} must be 16-byte aligned", s.toString(), fmt::ptr(p.x),
              fmt::ptr(p.w), p.y, fmt::ptr(p.bias));
}

struct CublasLtGemm::Impl {
    int gpu = 0;
    CublasLtGemmOptions options;
    cublasLtHandle_t handle = nullptr;
    DeviceBuffer workspace;
    std::map<GemmShape, Plan> plans;
    std::map<GemmShape, std::unique_ptr<Descriptors>> candidate_descs;  // the shapes candidates() was asked about

    const Plan& choose(const GemmShape& shape);
    // The heuristic's best batch-invariant algorithm for a shape's descriptors, first among those that need no
    // workspace; false when there is none, with the first refused candidates described in `refused`.
    bool search(const Descriptors& desc, cublasLtMatmulAlgo_t* algo, GemmAlgoInfo* info, std::string* refused);
};

bool CublasLtGemm::Impl::search(const Descriptors& desc, cublasLtMatmulAlgo_t* algo, GemmAlgoInfo* info,
                                std::string* refused) {
    constexpr int kDescribed = 4;
    int described = 0;
    for (const uint64_t max_workspace : {uint64_t{0}, static_cast<uint64_t>(options.workspace_bytes)}) {
        Preference preference(max_workspace);
        std::array<cublasLtMatmulHeuristicResult_t, kHeuristicResults> results{};
        int returned = 0;
        const cublasStatus_t status =
            cublasLtMatmulAlgoGetHeuristic(handle, desc.op.get, desc.a.get, desc.b.get, desc.d.get, desc.d.get,
                                           preference.get, kHeuristicResults, results.data(), &returned);
        if (status == CUBLAS_STATUS_NOT_SUPPORTED) {
            refused->append(fmt::format("; no algorithm within {} bytes of workspace", max_workspace));
            continue;
        }
        AFD_CUBLAS_CHECK(status);
        int rejected = 0;
        for (int i = 0; i < returned; ++i) {
            const cublasLtMatmulHeuristicResult_t& result = results[static_cast<size_t>(i)];
            if (result.state != CUBLAS_STATUS_SUCCESS) {
                ++rejected;
                continue;
            }
            GemmAlgoInfo candidate = describeAlgo(result);
            if (!batchInvariant(candidate)) {
                ++rejected;
                if (described++ < kDescribed) refused->append("; refused " + candidate.toString());
                continue;
            }
            candidate.candidates = returned;
            candidate.rejected = rejected;
            *algo = result.algo;
            *info = candidate;
            return true;
        }
        if (options.workspace_bytes == 0) break;
    }
    return false;
}

const Plan& CublasLtGemm::Impl::choose(const GemmShape& shape) {
    Plan plan;
    plan.desc = std::make_unique<Descriptors>(shape);
    const bool per_weight = options.policy == GemmAlgoPolicy::kPerWeight && shape.m != kGemmReferenceRows;
    std::string refused;
    if (per_weight || !search(*plan.desc, &plan.algo, &plan.info, &refused)) {
        AFD_CHECK(shape.m != kGemmReferenceRows,
                  "cuBLASLt offers no batch-invariant algorithm (tensor cores, FP32 accumulation, no split-K) for "
                  "GEMM {} on cuda:{} within a {}-byte workspace{}",
                  shape.toString(), gpu, options.workspace_bytes, refused);
        // The reference M's algorithm (chosen once per weight shape), checked against this M.
        GemmShape reference = shape;
        reference.m = kGemmReferenceRows;
        const Plan& ref = plans.contains(reference) ? plans.at(reference) : choose(reference);
        cublasLtMatmulHeuristicResult_t check{};
        const cublasStatus_t status =
            cublasLtMatmulAlgoCheck(handle, plan.desc->op.get, plan.desc->a.get, plan.desc->b.get, plan.desc->d.get,
                                    plan.desc->d.get, &ref.algo, &check);
        AFD_CHECK(status == CUBLAS_STATUS_SUCCESS && check.workspaceSize <= options.workspace_bytes,
                  "cuBLASLt GEMM {}: the algorithm chosen at M {} ({}) does not run at this M (status {}, workspace "
                  "{} of {})",
                  shape.toString(), kGemmReferenceRows, ref.info.toString(), static_cast<int>(status),
                  check.workspaceSize, options.workspace_bytes);
        plan.algo = ref.algo;
        plan.info = ref.info;
        plan.info.workspace_bytes = check.workspaceSize;
        plan.info.borrowed_from_m = kGemmReferenceRows;
    }
    return plans.emplace(shape, std::move(plan)).first->second;
}

CublasLtGemm::CublasLtGemm(int gpu, const CublasLtGemmOptions& options) : impl_(std::make_unique<Impl>()) {
    impl_->gpu = gpu;
    impl_->options = options;
    int previous = 0;
    AFD_CUDA_CHECK(cudaGetDevice(&previous));
    AFD_CUDA_CHECK(cudaSetDevice(gpu));
    try {
        AFD_CUBLAS_CHECK(cublasLtCreate(&impl_->handle));
        impl_->workspace = DeviceBuffer(options.workspace_bytes);
    } catch (...) {
        if (impl_->handle != nullptr) (void)cublasLtDestroy(impl_->handle);
        (void)cudaSetDevice(previous);
        throw;
    }
    AFD_CUDA_CHECK(cudaSetDevice(previous));
}

CublasLtGemm::~CublasLtGemm() {
    if (impl_ == nullptr) return;
    int previous = 0;
    const bool restore = cudaGetDevice(&previous) == cudaSuccess && cudaSetDevice(impl_->gpu) == cudaSuccess;
    impl_->plans.clear();
    impl_->workspace = DeviceBuffer();
    if (impl_->handle != nullptr) (void)cublasLtDestroy(impl_->handle);
    if (restore) (void)cudaSetDevice(previous);
}

void CublasLtGemm::prepare(const GemmShape& shape) {
    checkGemmShape(shape);
    if (shape.m == 0 || impl_->plans.contains(shape)) return;
    impl_->choose(shape);
}

void CublasLtGemm::prepare(std::span<const GemmShape> shapes) {
    for (const GemmShape& shape : shapes) prepare(shape);
}

void CublasLtGemm::matmul(const GemmParams& p, cudaStream_t stream) {
    checkGemmParams(p);
    if (p.m == 0) return;
    const GemmShape shape = p.shape();
    int current = -1;
    AFD_CUDA_CHECK(cudaGetDevice(&current));
    AFD_CHECK(current == impl_->gpu, "cuBLASLt GEMM {}: this object belongs to cuda:{}, but cuda:{} is current",
              shape.toString(), impl_->gpu, current);
    auto it = impl_->plans.find(shape);
    const Plan* plan = nullptr;
    if (it != impl_->plans.end()) {
        plan = &it->second;
    } else {
        cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
        AFD_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
        AFD_CHECK(capture == cudaStreamCaptureStatusNone,
                  "cuBLASLt GEMM {}: shape not prepared before the CUDA graph capture on its stream (prepare() it "
                  "first)",
                  shape.toString());
        plan = &impl_->choose(shape);
    }
    if (p.bias != nullptr) {
        // The pointer is part of the operation descriptor: set per call (host memory only, capturable).
        const void* bias = p.bias;
        AFD_CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(plan->desc->op.get, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    const float alpha = 1.0f;
    const float beta = 0.0f;
    AFD_CUBLAS_CHECK(cublasLtMatmul(impl_->handle, plan->desc->op.get, &alpha, p.w, plan->desc->a.get, p.x,
                                    plan->desc->b.get, &beta, p.y, plan->desc->d.get, p.y, plan->desc->d.get,
                                    &plan->algo, impl_->workspace.get(), impl_->workspace.bytes(), stream));
}

std::vector<GemmCandidate> CublasLtGemm::candidates(const GemmShape& shape, std::span<const int> forced_splits) {
    checkGemmShape(shape);
    AFD_CHECK(shape.m > 0, "cuBLASLt GEMM {}: candidates of an empty GEMM", shape.toString());
    auto& desc = impl_->candidate_descs[shape];
    if (desc == nullptr) desc = std::make_unique<Descriptors>(shape);
    std::vector<GemmCandidate> out;
    const auto known = [&out](const cublasLtMatmulAlgo_t& algo) {
        return std::any_of(out.begin(), out.end(), [&](const GemmCandidate& c) {
            return std::equal(c.algo.begin(), c.algo.end(), std::begin(algo.data));
        });
    };
    const auto add = [&](const cublasLtMatmulHeuristicResult_t& result, bool forced) {
        GemmCandidate c;
        c.info = describeAlgo(result);
        c.batch_invariant = batchInvariant(c.info);
        c.forced_split = forced;
        std::copy(std::begin(result.algo.data), std::end(result.algo.data), c.algo.begin());
        out.push_back(c);
    };
    for (const uint64_t max_workspace : {uint64_t{0}, static_cast<uint64_t>(impl_->options.workspace_bytes)}) {
        Preference preference(max_workspace);
        std::array<cublasLtMatmulHeuristicResult_t, kHeuristicResults> results{};
        int returned = 0;
        const cublasStatus_t status =
            cublasLtMatmulAlgoGetHeuristic(impl_->handle, desc->op.get, desc->a.get, desc->b.get, desc->d.get,
                                           desc->d.get, preference.get, kHeuristicResults, results.data(), &returned);
        if (status == CUBLAS_STATUS_NOT_SUPPORTED) continue;
        AFD_CUBLAS_CHECK(status);
        for (int i = 0; i < returned; ++i) {
            const auto& result = results[static_cast<size_t>(i)];
            if (result.state == CUBLAS_STATUS_SUCCESS && !known(result.algo)) add(result, false);
        }
    }
    const size_t heuristic = out.size();
    for (size_t i = 0; i < heuristic; ++i) {
        if (!out[i].batch_invariant) continue;
        for (const int splits : forced_splits) {
            if (splits <= 1) continue;
            cublasLtMatmulAlgo_t algo{};
            std::copy(out[i].algo.begin(), out[i].algo.end(), std::begin(algo.data));
            const int32_t split = splits;
            const uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
            if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split, sizeof(split)) !=
                    CUBLAS_STATUS_SUCCESS ||
                cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                                     sizeof(scheme)) != CUBLAS_STATUS_SUCCESS) {
                continue;
            }
            cublasLtMatmulHeuristicResult_t check{};
            if (cublasLtMatmulAlgoCheck(impl_->handle, desc->op.get, desc->a.get, desc->b.get, desc->d.get, desc->d.get,
                                        &algo, &check) != CUBLAS_STATUS_SUCCESS ||
                check.workspaceSize > impl_->options.workspace_bytes || known(algo)) {
                continue;
            }
            check.algo = algo;
            add(check, true);
        }
    }
    return out;
}

void CublasLtGemm::matmulWith(const GemmParams& p, const GemmCandidate& candidate, cudaStream_t stream) {
    checkGemmParams(p);
    if (p.m == 0) return;
    const GemmShape shape = p.shape();
    const auto it = impl_->candidate_descs.find(shape);
    AFD_CHECK(it != impl_->candidate_descs.end(), "cuBLASLt GEMM {}: candidates() was not asked about this shape",
              shape.toString());
    const Descriptors& desc = *it->second;
    if (p.bias != nullptr) {
        const void* bias = p.bias;
        AFD_CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(desc.op.get, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    cublasLtMatmulAlgo_t algo{};
    std::copy(candidate.algo.begin(), candidate.algo.end(), std::begin(algo.data));
    const float alpha = 1.0f;
    const float beta = 0.0f;
    AFD_CUBLAS_CHECK(cublasLtMatmul(impl_->handle, desc.op.get, &alpha, p.w, desc.a.get, p.x, desc.b.get, &beta, p.y,
                                    desc.d.get, p.y, desc.d.get, &algo, impl_->workspace.get(),
                                    impl_->workspace.bytes(), stream));
}

bool CublasLtGemm::isPrepared(const GemmShape& shape) const { return impl_->plans.contains(shape); }

size_t CublasLtGemm::numPrepared() const { return impl_->plans.size(); }

GemmAlgoInfo CublasLtGemm::algoInfo(const GemmShape& shape) const {
    auto it = impl_->plans.find(shape);
    AFD_CHECK(it != impl_->plans.end(), "cuBLASLt GEMM {}: not prepared", shape.toString());
    return it->second.info;
}

int CublasLtGemm::gpu() const { return impl_->gpu; }

size_t CublasLtGemm::workspaceBytes() const { return impl_->options.workspace_bytes; }

GemmAlgoPolicy CublasLtGemm::policy() const { return impl_->options.policy; }

}  // namespace afd::kernels::cuda
