#include "attention/step_buffers.h"

#include <algorithm>

#include "core/check.h"

namespace afd::attention {
namespace {

constexpr int64_t kAlign = 16;  // I32 elements: 64 bytes

int64_t alignUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

StepBuffers::StepBuffers(DeviceOps& ops, const StepLimits& limits) : ops_(ops), limits_(limits) {
    AFD_CHECK(limits.max_tokens > 0 && limits.max_chunks > 0 && limits.block_table_width > 0,
              "bad step limits: {} tokens, {} chunks, {} blocks per sequence", limits.max_tokens, limits.max_chunks,
              limits.block_table_width);
    int64_t at = 0;
    auto take = [&at](int64_t n) {
        const int64_t offset = at;
        at = alignUp(at + n);
        return offset;
    };
    tokens_ = take(limits.max_tokens);
    positions_ = take(limits.max_tokens);
    slot_mapping_ = take(limits.max_tokens);
    logits_rows_ = take(limits.max_chunks);
    num_valid_ = take(1);
    for (auto& s : stage_) {
        s.q_start = take(limits.max_chunks + 1);
        s.seq_len = take(limits.max_chunks);
        s.block_tables = take(limits.max_chunks * limits.block_table_width);
        s.end = at;
    }
    host_ = ops.emptyHost(core::DType::kI32, {at});
    device_ = ops.empty(core::DType::kI32, {at});
}

StepTensors StepBuffers::upload(const ForwardBatch& b) {
    const int64_t T = b.numTokens();
    const auto R = static_cast<int64_t>(b.logits_rows.size());
    const int64_t W = limits_.block_table_width;
    AFD_CHECK(T <= limits_.max_tokens, "a step of {} tokens exceeds the limit of {}", T, limits_.max_tokens);
    AFD_CHECK(R <= limits_.max_chunks, "a step of {} sampling rows exceeds the limit of {}", R, limits_.max_chunks);
    AFD_CHECK(b.block_table_width == W, "block tables {} wide, the buffers' are {}", b.block_table_width, W);
    AFD_CHECK(!b.stages.empty() && b.stages.size() <= 2, "a step has 1 or 2 stages, got {}", b.stages.size());
    AFD_CHECK(static_cast<int64_t>(b.positions.size()) == T && static_cast<int64_t>(b.slot_mapping.size()) == T,
              "batch arrays disagree on the token count");
    int32_t* host = host_.data<int32_t>();
    std::copy(b.tokens.begin(), b.tokens.end(), host + tokens_);
    std::copy(b.positions.begin(), b.positions.end(), host + positions_);
    std::copy(b.slot_mapping.begin(), b.slot_mapping.end(), host + slot_mapping_);
    std::copy(b.logits_rows.begin(), b.logits_rows.end(), host + logits_rows_);
    AFD_CHECK(b.num_padding >= 0 && b.num_padding <= T, "a step of {} rows with {} padding rows", T, b.num_padding);
    host[num_valid_] = static_cast<int32_t>(b.numValidTokens());

    StepTensors out;
    out.tokens = device_.slice(tokens_, tokens_ + T);
    out.positions = device_.slice(positions_, positions_ + T);
    out.slot_mapping = device_.slice(slot_mapping_, slot_mapping_ + T);
    out.logits_rows = device_.slice(logits_rows_, logits_rows_ + R);
    out.num_valid = device_.slice(num_valid_, num_valid_ + 1);
    out.padded = b.num_padding > 0;
    for (size_t s = 0; s < b.stages.size(); ++s) {
        const StageChunks& stage = b.stages[s];
        const StageSections& at = stage_[s];
        const int64_t S = stage.numChunks();
        AFD_CHECK(S <= limits_.max_chunks, "stage {} has {} chunks, more than the limit of {}", s, S,
                  limits_.max_chunks);
        AFD_CHECK(static_cast<int64_t>(stage.q_start.size()) == S + 1 &&
                      static_cast<int64_t>(stage.block_tables.size()) == S * W,
                  "stage {} arrays disagree on its {} chunks", s, S);
        // The stages cover the step's rows in order.
        const int64_t want_begin = s == 0 ? 0 : b.stages[s - 1].end;
        const int64_t want_end = s + 1 == b.stages.size() ? T : stage.end;
        AFD_CHECK(stage.begin == want_begin && stage.begin <= stage.end && stage.end == want_end,
                  "stage {} has rows [{}, {}) of a step of {}", s, stage.begin, stage.end, T);
        std::copy(stage.q_start.begin(), stage.q_start.end(), host + at.q_start);
        std::copy(stage.seq_len.begin(), stage.seq_len.end(), host + at.seq_len);
        std::copy(stage.block_tables.begin(), stage.block_tables.end(), host + at.block_tables);
        StageTensors st;
        st.begin = stage.begin;
        st.end = stage.end;
        st.chunks.q_start = device_.slice(at.q_start, at.q_start + S + 1);
        st.chunks.seq_len = device_.slice(at.seq_len, at.seq_len + S);
        st.chunks.block_tables = device_.slice(at.block_tables, at.block_tables + S * W).reshape({S, W});
        st.chunks.max_query_len = stage.max_query_len;
        st.chunks.max_seq_len = stage.max_seq_len;
        out.stages.push_back(std::move(st));
        // Stage 0 goes with the step sections before it; stage 1 on its own.
        const int64_t first = s == 0 ? 0 : at.q_start;
        const int64_t last = at.block_tables + S * W;
        ops_.copy(host_.slice(first, last), device_.slice(first, last));
    }
    return out;
}

}  // namespace afd::attention
