#include "transport/exchange_test_util.h"

#include <fmt/format.h>

#include "transport/transport_test_util.h"

namespace afd::transport::testing {
namespace {

constexpr uint64_t kA2fTag = 100;
constexpr uint64_t kF2aTag = 200;

uint64_t segmentSeed(uint64_t tag, size_t segment, uint64_t step, uint32_t layer, uint32_t stage, int a, int f) {
    return seedOf(tag + segment, step, layer, stage, static_cast<uint64_t>(a), static_cast<uint64_t>(f));
}

FramePayload makePayload(const FrameSpec& spec, uint64_t tag, uint32_t rows, uint64_t step, uint32_t layer,
                         uint32_t stage, int a, int f) {
    FramePayload payload;
    payload.rows = rows;
    for (size_t i = 0; i < spec.segments.size(); ++i) {
        const SegmentSpec& s = spec.segments[i];
        payload.segments.push_back(makeTensor(s.dtype, rows, s.cols, segmentSeed(tag, i, step, layer, stage, a, f)));
    }
    return payload;
}

std::string checkFrame(const ReceivedFrame& frame, const FrameSpec& spec, uint64_t tag, uint32_t rows, uint64_t step,
                       uint32_t layer, uint32_t stage, int a, int f) {
    const std::string where =
        fmt::format("step {} layer {} stage {} between attention {} and ffn {}", step, layer, stage, a, f);
    if (!frame.active) return where + ": frame inactive";
    if (frame.rows != rows) return fmt::format("{}: {} rows, expected {}", where, frame.rows, rows);
    if (frame.segments.size() != spec.segments.size()) {
        return fmt::format("{}: {} segments, expected {}", where, frame.segments.size(), spec.segments.size());
    }
    for (size_t i = 0; i < spec.segments.size(); ++i) {
        const SegmentSpec& s = spec.segments[i];
        const std::string diff =
            compareTensor(frame.segments[i], s.dtype, rows, s.cols, segmentSeed(tag, i, step, layer, stage, a, f));
        if (!diff.empty()) return fmt::format("{}: segment {}: {}", where, i, diff);
    }
    return "";
}

}  // namespace

uint32_t planRows(const ExchangePlan& plan, uint64_t step, uint32_t layer, uint32_t stage, int a, int f) {
    if (plan.full_rows) return plan.max_rows;
    const uint64_t h = seedOf(7, step, layer, stage, static_cast<uint64_t>(a), static_cast<uint64_t>(f));
    if ((h >> 40) % 4 == 0) return 0;  // a quarter of the frames are empty
    return static_cast<uint32_t>(h % (plan.max_rows + 1));
}

std::string runAttention(AttentionConnector& connector, int rank, const ExchangePlan& plan, int steps_to_run) {
    const auto peers = connector.peers();
    const size_t num_steps = steps_to_run < 0 ? plan.steps.size() : static_cast<size_t>(steps_to_run);
    for (size_t s = 0; s < num_steps; ++s) {
        const StepPlan& sp = plan.steps[s];
        StepHeader header;
        header.step = sp.step;
        header.flags = sp.flags;
        header.num_stages = sp.num_stages;
        for (uint32_t st = 0; st < sp.num_stages; ++st) header.stage_tokens[st] = (rank + st + 1) % (plan.max_rows + 1);
        if (core::Status st = connector.sendStep(header); !st.isOk()) return "sendStep: " + st.toString();
        for (uint32_t layer : plan.layers) {
            const auto dispatchStage = [&](uint32_t stage) -> std::string {
                std::vector<FramePayload> payloads;
                for (const PeerInfo& peer : peers) {
                    const uint32_t rows = planRows(plan, sp.step, layer, stage, rank, peer.rank);
                    payloads.push_back(makePayload(plan.a2f, kA2fTag, rows, sp.step, layer, stage, rank, peer.rank));
                }
                const core::Status st = connector.dispatch({sp.step, layer, stage}, payloads);
                return st.isOk() ? "" : "dispatch: " + st.toString();
            };
            const auto combineStage = [&](uint32_t stage) -> std::string {
                auto frames = connector.combine({sp.step, layer, stage}, plan.f2a);
                if (!frames.isOk()) return "combine: " + frames.status().toString();
                if (frames->size() != peers.size()) return "combine: wrong number of frames";
                for (size_t i = 0; i < peers.size(); ++i) {
                    const int f = peers[i].rank;
                    const uint32_t rows = planRows(plan, sp.step, layer, stage, rank, f);
                    std::string e = checkFrame((*frames)[i], plan.f2a, kF2aTag, rows, sp.step, layer, stage, rank, f);
                    if (!e.empty()) return "combine: " + e;
                }
                return "";
            };
            if (plan.dispatch_all_stages_first) {
                for (uint32_t st = 0; st < sp.num_stages; ++st) {
                    if (std::string e = dispatchStage(st); !e.empty()) return e;
                }
                for (uint32_t st = 0; st < sp.num_stages; ++st) {
                    if (std::string e = combineStage(st); !e.empty()) return e;
                }
            } else {
                for (uint32_t st = 0; st < sp.num_stages; ++st) {
                    if (std::string e = dispatchStage(st); !e.empty()) return e;
                    if (std::string e = combineStage(st); !e.empty()) return e;
                }
            }
        }
    }
    StepHeader shutdown;
    shutdown.step = num_steps < plan.steps.size() ? plan.steps[num_steps].step : plan.steps.back().step + 1;
    shutdown.flags = kStepShutdown;
    if (core::Status st = connector.sendStep(shutdown); !st.isOk()) return "shutdown: " + st.toString();
    connector.close();
    return "";
}

FfnLog runFfn(FfnConnector& connector, int rank, const ExchangePlan& plan) {
    FfnLog log;
    const auto peers = connector.peers();
    while (true) {
        auto info = connector.receiveStep();
        if (!info.isOk()) {
            log.error = "receiveStep: " + info.status().toString();
            return log;
        }
        if (info->all_left) {
            log.all_left = true;
            return log;
        }
        if (log.steps.size() >= plan.steps.size()) {
            log.error = fmt::format("step {} beyond the plan", info->step);
            return log;
        }
        const StepPlan& sp = plan.steps[log.steps.size()];
        log.steps.push_back(info->step);
        if (info->step != sp.step || info->num_stages != sp.num_stages || info->flags != sp.flags) {
            log.error = fmt::format("step {} with {} stages, expected step {} with {}", info->step, info->num_stages,
                                    sp.step, sp.num_stages);
            return log;
        }
        std::vector<bool> active;
        for (size_t i = 0; i < peers.size(); ++i) {
            active.push_back(info->peers[i].active);
            const uint32_t want = (peers[i].rank + 1) % (plan.max_rows + 1);
            if (info->peers[i].active && info->peers[i].stage_tokens[0] != want) {
                log.error = fmt::format("step {}: peer {} announced {} tokens, expected {}", sp.step, peers[i].rank,
                                        info->peers[i].stage_tokens[0], want);
                return log;
            }
        }
        log.active.push_back(active);
        for (uint32_t layer : plan.layers) {
            for (uint32_t stage = 0; stage < sp.num_stages; ++stage) {
                auto frames = connector.receive({sp.step, layer, stage}, plan.a2f);
                if (!frames.isOk()) {
                    log.error = "receive: " + frames.status().toString();
                    return log;
                }
                std::vector<FramePayload> replies(peers.size());
                for (size_t i = 0; i < peers.size(); ++i) {
                    const ReceivedFrame& frame = (*frames)[i];
                    if (frame.active != active[i]) {
                        log.error = fmt::format("peer {} frame active={} in a step where it is active={}",
                                                peers[i].rank, frame.active, static_cast<bool>(active[i]));
                        return log;
                    }
                    if (!frame.active) continue;
                    const int a = peers[i].rank;
                    const uint32_t rows = planRows(plan, sp.step, layer, stage, a, rank);
                    log.error = checkFrame(frame, plan.a2f, kA2fTag, rows, sp.step, layer, stage, a, rank);
                    if (!log.error.empty()) return log;
                    replies[i] = makePayload(plan.f2a, kF2aTag, rows, sp.step, layer, stage, a, rank);
                }
                if (core::Status st = connector.send({sp.step, layer, stage}, replies); !st.isOk()) {
                    log.error = "send: " + st.toString();
                    return log;
                }
            }
        }
    }
}

}  // namespace afd::transport::testing
