#include "tokenizer/pre_tokenizer.h"

#include <string>

#include "core/check.h"

namespace afd::tokenizer {
namespace {

struct Range {
    size_t begin;
    size_t end;
    bool is_delimiter;
};

// HF tokenizers' rules for the three behaviors that join pieces, on the (piece, is_delimiter) list of a pattern.
std::vector<Range> joinByBehavior(const std::vector<Range>& ranges, SplitBehavior behavior) {
    std::vector<Range> out;
    out.reserve(ranges.size());
    bool previous_delimiter = false;
    if (behavior == SplitBehavior::kMergedWithNext) {
        for (size_t k = ranges.size(); k-- > 0;) {
            const Range& r = ranges[k];
            if (r.is_delimiter && !previous_delimiter && !out.empty()) {
                out.back().begin = r.begin;
            } else {
                out.push_back({r.begin, r.end, false});
            }
            previous_delimiter = r.is_delimiter;
        }
        return {out.rbegin(), out.rend()};
    }
    for (const Range& r : ranges) {
        const bool join = behavior == SplitBehavior::kContiguous ? r.is_delimiter == previous_delimiter
                                                                 : r.is_delimiter && !previous_delimiter;
        if (join && !out.empty()) {
            out.back().end = r.end;
        } else {
            out.push_back({r.begin, r.end, false});
        }
        previous_delimiter = r.is_delimiter;
    }
    return out;
}

}  // namespace

core::Result<ByteLevelStep> makeByteLevelStep(bool add_prefix_space, bool use_regex, bool use_jit) {
    ByteLevelStep step;
    step.add_prefix_space = add_prefix_space;
    if (use_regex) {
        AFD_ASSIGN_OR_RETURN(Regex regex, Regex::compile(kGpt2Pattern, use_jit));
        step.gpt2_regex.emplace(std::move(regex));
    }
    return step;
}

PreTokenizer::PreTokenizer(std::vector<Step> steps) : steps_(std::move(steps)) {
    for (size_t i = 0; i + 1 < steps_.size(); ++i) {
        AFD_CHECK(!std::holds_alternative<ByteLevelStep>(steps_[i]), "ByteLevel must be the last pre-tokenizer step");
    }
}

bool PreTokenizer::byteLevel() const { return !steps_.empty() && std::holds_alternative<ByteLevelStep>(steps_.back()); }

bool PreTokenizer::usesJit() const {
    for (const Step& step : steps_) {
        if (const auto* split = std::get_if<SplitStep>(&step); split != nullptr && !split->regex.usesJit()) {
            return false;
        }
        if (const auto* bl = std::get_if<ByteLevelStep>(&step);
            bl != nullptr && bl->gpt2_regex && !bl->gpt2_regex->usesJit()) {
            return false;
        }
    }
    return true;
}

core::Status PreTokenizer::forEachWord(std::string_view piece, const OnWord& on_word) const {
    return run(0, piece, on_word);
}

core::Status PreTokenizer::run(size_t step, std::string_view piece, const OnWord& on_word) const {
    if (piece.empty()) return core::Status::ok();
    if (step == steps_.size()) {
        on_word(piece);
        return core::Status::ok();
    }
    if (const auto* byte_level = std::get_if<ByteLevelStep>(&steps_[step])) {
        std::string prefixed;
        if (byte_level->add_prefix_space && piece.front() != ' ') {
            prefixed.reserve(piece.size() + 1);
            prefixed += ' ';
            prefixed += piece;
            piece = prefixed;
        }
        if (!byte_level->gpt2_regex) return run(step + 1, piece, on_word);
        core::Status inner;
        size_t previous = 0;
        AFD_RETURN_IF_ERROR(byte_level->gpt2_regex->forEachMatch(piece, [&](size_t begin, size_t end) {
            if (!inner.isOk()) return;
            if (previous < begin) inner = run(step + 1, piece.substr(previous, begin - previous), on_word);
            if (inner.isOk()) inner = run(step + 1, piece.substr(begin, end - begin), on_word);
            previous = end;
        }));
        AFD_RETURN_IF_ERROR(inner);
        return run(step + 1, piece.substr(previous), on_word);
    }

    const SplitStep& split = std::get<SplitStep>(steps_[step]);
    if (split.behavior == SplitBehavior::kIsolated || split.behavior == SplitBehavior::kRemoved) {
        // No piece depends on its neighbours: pieces go on as the matches come.
        const bool keep_matches = split.behavior == SplitBehavior::kIsolated || split.invert;
        const bool keep_gaps = split.behavior == SplitBehavior::kIsolated || !split.invert;
        core::Status inner;
        size_t previous = 0;
        AFD_RETURN_IF_ERROR(split.regex.forEachMatch(piece, [&](size_t begin, size_t end) {
            if (!inner.isOk()) return;
            if (keep_gaps && previous < begin) {
                inner = run(step + 1, piece.substr(previous, begin - previous), on_word);
            }
            if (keep_matches && inner.isOk()) inner = run(step + 1, piece.substr(begin, end - begin), on_word);
            previous = end;
        }));
        AFD_RETURN_IF_ERROR(inner);
        if (keep_gaps) return run(step + 1, piece.substr(previous), on_word);
        return core::Status::ok();
    }

    std::vector<Range> ranges;
    size_t previous = 0;
    AFD_RETURN_IF_ERROR(split.regex.forEachMatch(piece, [&](size_t begin, size_t end) {
        if (previous < begin) ranges.push_back({previous, begin, split.invert});
        ranges.push_back({begin, end, !split.invert});
        previous = end;
    }));
    if (previous < piece.size()) ranges.push_back({previous, piece.size(), split.invert});
    for (const Range& r : joinByBehavior(ranges, split.behavior)) {
        AFD_RETURN_IF_ERROR(run(step + 1, piece.substr(r.begin, r.end - r.begin), on_word));
    }
    return core::Status::ok();
}

}  // namespace afd::tokenizer
