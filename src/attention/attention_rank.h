// AttentionRank: the attention side of a process (DESIGN.md §7), the counterpart of ffn/ffn_service.h, shared by
// `afd generate` (the dense reference, or one AFD attention rank), `afd launch`'s dense reference and `afd serve`.
//
//   configure    checks what needs no allocation: the engine options; random weights only on a GPU; with AFD the
//                rank within num_attention_ranks, the connector (transport::checkConnectorUsable: built here and
//                fit for the device), max_num_batched_tokens within
//                afd.max_num_tokens, a checkpoint (FFN ranks load theirs), and in m2n MoE layers and at least
//                num_ffn_ranks experts                                                  → kInvalidArgument
//   load         device ops; the weights on the device (AFD: the rank's selection, and the model fingerprint); the
//                dense engine's local MLP backend; on a GPU the KV budget (engine_memory.h)  → the file's or
//                device's error
//   connect      AFD: rendezvous and handshake with the FFN peers (bounded by afd.connect_timeout_s, interrupted
//                through options.setup_cancel); the dense engine: nothing                 → the peer's error
//   startEngine  AFD: the RemoteMlpBackend over the connector; then the engine (KV cache, workspaces, decode graphs)
// Errors are Status naming the flag, key, file, device or peer (cli's exitCodeFor turns them into exit codes).
//
// Ownership: the rank owns the model source (config and checkpoint mappings), the device ops, the weights, the MLP
// backend, the connector, the engine and, once started, the engine loop. shutdown() (and the destructor) releases
// them in reverse: the loop stopped and joined → Engine::finish (AFD: the FFN peers learn that this rank leaves) →
// the connector closed → engine, backend, connector, weights, ops, source destroyed.
// Threads: one owner thread makes every call. While the loop runs, the engine belongs to the loop's thread: reach it
// through loop(), not engine().
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "attention/cpu_ops.h"
#include "attention/device_ops.h"
#include "attention/engine.h"
#include "attention/engine_loop.h"
#include "attention/engine_memory.h"
#include "attention/mlp_backend.h"
#include "attention/model_source.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "transport/afd_config.h"
#include "transport/connector.h"
#include "transport/connector_backend.h"
#include "transport/socket.h"

namespace afd::attention {

// A backend the dense engine uses in place of the local one (a benchmark's probe around it); gets the local backend
// and what it was built from, all alive as long as the engine.
using BackendWrapper = std::function<core::Result<std::unique_ptr<MlpBackend>>(
    std::unique_ptr<MlpBackend> inner, const model::ModelConfig& config, const model::ModelWeights& weights,
    DeviceOps& ops)>;

// Makes the connector of an AFD rank from the request the rank computed (default: transport::makeAttentionConnector,
// the backend afd.connector names).
using ConnectorFactory = std::function<core::Result<std::unique_ptr<transport::AttentionConnector>>(
    const transport::ConnectorRequest& request)>;

struct AttentionRankOptions {
    core::Device device = core::Device::cpu();
    CpuPrecision cpu_precision = CpuPrecision::kFp32;  // CpuOps' precision (a GPU computes in BF16)
    // Complete (max_model_len, max_num_batched_tokens: see defaultMaxNumBatchedTokens). On a GPU kv_cache_bytes is
    // replaced by the budget gpu_memory_utilization leaves, unless gpu.kv_given.
    EngineOptions engine;
    GpuKvSizing gpu;
    // Set: this process is attention rank `attention_rank` of that AFD deployment (its MLP/MoE blocks on the FFN
    // ranks). Unset: the dense engine (every layer here).
    std::optional<transport::AfdConfig> afd;
    int attention_rank = 0;
    BackendWrapper wrap_backend;         // optional: wraps the MLP backend (local or remote) once it is made
    ConnectorFactory connector_factory;  // AFD only; optional (tests put a fake connector here)
    // AFD: cancels the rendezvous and connection setup in connect() (e.g. on SIGTERM). Optional; outlives connect().
    const transport::Canceller* setup_cancel = nullptr;
    // Called on the owner thread in load() after each layer read from the checkpoint (a progress bar). Optional.
    model::LoadProgress on_load_progress;
};

// --max-num-batched-tokens when the user gives none: 2048, and under AFD at most afd.max_num_tokens (the most rows a
// frame carries).
int64_t defaultMaxNumBatchedTokens(const std::optional<transport::AfdConfig>& afd);

class AttentionRank {
public:
    enum class State { kConfigured, kLoaded, kConnected, kReady, kStopped };

    static core::Result<std::unique_ptr<AttentionRank>> configure(ModelSource source, AttentionRankOptions options);
    // The stages, in order (calling one out of order is a bug: AFD_CHECK). After an error the rank is unusable; destroy
    // it (which releases what the stages built).
    core::Status load();
    core::Status connect();
    core::Status startEngine();
    // configure, load, connect, startEngine.
    static core::Result<std::unique_ptr<AttentionRank>> create(ModelSource source, AttentionRankOptions options);

    // After startEngine: puts the engine on its own thread for serving (engine_loop.h). Once.
    EngineLoop& startLoop(EngineLoopOptions options = {});

    // Stops the loop (bounded by `timeout`; its requests end with an error), finishes the engine and closes the
    // connector. Returns the engine's finish status (AFD: the shutdown header to the FFN peers), or kTimeout when the
    // loop did not stop in time (then nothing else is released; call again or destroy the rank, which waits).
    // Idempotent.
    core::Status shutdown(std::chrono::milliseconds timeout);
    ~AttentionRank();
    AttentionRank(const AttentionRank&) = delete;
    AttentionRank& operator=(const AttentionRank&) = delete;

    State state() const { return state_; }
    bool isAfd() const { return options_.afd.has_value(); }
    const std::optional<transport::AfdConfig>& afd() const { return options_.afd; }
    const ModelSource& source() const { return source_; }
    const model::ModelConfig& config() const { return source_.config; }
    // The engine's options as it was built with them (after the KV budget on a GPU).
    const EngineOptions& engineOptions() const { return engine_options_; }
    // After load.
    DeviceOps& ops() { return *ops_; }
    const model::ModelWeights& weights() const { return weights_; }
    // After startEngine (the dense engine's after load).
    MlpBackend& backend() { return *backend_; }
    // After startEngine; not while the loop runs.
    Engine& engine() { return *engine_; }
    // Null before startLoop.
    EngineLoop* loop() { return loop_.get(); }
    // AFD, after connect: the connector (null otherwise).
    transport::AttentionConnector* connector() { return connector_.get(); }

private:
    AttentionRank() = default;
    transport::ConnectorRequest connectorRequest() const;

    State state_ = State::kConfigured;
    AttentionRankOptions options_;
    EngineOptions engine_options_;
    std::string model_fingerprint_;  // AFD
    // Destroyed in reverse order of declaration: loop first, source last.
    ModelSource source_;
    std::unique_ptr<DeviceOps> ops_;
    model::ModelWeights weights_;
    std::unique_ptr<transport::AttentionConnector> connector_;
    std::unique_ptr<MlpBackend> backend_;
    std::unique_ptr<Engine> engine_;
    std::unique_ptr<EngineLoop> loop_;
};

}  // namespace afd::attention
