// Scripted engine steps for connector tests: attention ranks send steps and frames of deterministic content, FFN
// ranks check every byte they receive and answer with deterministic frames, which attention checks in turn.
// Content depends only on (step, layer, stage, attention rank, ffn rank, segment), so each side regenerates what
// the other must have sent without sharing anything with the code under test.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "transport/connector.h"

namespace afd::transport::testing {

struct StepPlan {
    uint64_t step = 0;
    uint32_t num_stages = 1;
    uint32_t flags = 0;
};

struct ExchangePlan {
    std::vector<StepPlan> steps;
    std::vector<uint32_t> layers;  // crossing layers, in order
    FrameSpec a2f;
    FrameSpec f2a;
    uint32_t max_rows = 0;
    bool full_rows = false;                 // every frame has max_rows rows (otherwise random in 0..max_rows, often 0)
    bool dispatch_all_stages_first = true;  // DBO order: dispatch every stage of a layer, then combine each
};

// Rows attention rank `a` sends FFN rank `f` for (step, layer, stage); the reply has as many.
uint32_t planRows(const ExchangePlan& plan, uint64_t step, uint32_t layer, uint32_t stage, int a, int f);

// Runs `steps_to_run` steps of the plan (all when < 0) and then sends a shutdown header. Returns "" or the first
// problem found.
std::string runAttention(AttentionConnector& connector, int rank, const ExchangePlan& plan, int steps_to_run = -1);

// What an FFN rank saw.
struct FfnLog {
    std::string error;                      // "" or the first problem found
    std::vector<uint64_t> steps;            // step ids received
    std::vector<std::vector<bool>> active;  // per step, per peer
    bool all_left = false;
};
// Serves steps until every peer has left (or an error).
FfnLog runFfn(FfnConnector& connector, int rank, const ExchangePlan& plan);

}  // namespace afd::transport::testing
