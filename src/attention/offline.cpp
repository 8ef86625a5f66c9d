#include "attention/offline.h"

#include <map>

namespace afd::attention {

OfflineGeneration generateOffline(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                                  const SamplingParams& params, bool want_prompt_logits,
                                  const std::function<bool()>& cancelled) {
    OfflineGeneration run;
    std::map<int64_t, size_t> index_of;
    for (size_t i = 0; i < prompts.size(); ++i) {
        core::Result<int64_t> id = engine.addRequest(prompts[i], params, want_prompt_logits);
        if (!id.isOk()) {
            run.status = id.status();
            engine.failAll(run.status);
            (void)engine.finish();
            return run;
        }
        index_of[*id] = i;
    }
    run.results.resize(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) run.results[i].prompt_ids = prompts[i];
    auto collect = [&](std::vector<std::unique_ptr<Sequence>>& finished, FinishReason unfinished) {
        for (auto& seq : finished) {
            GenerationResult& r = run.results[index_of.at(seq->id)];
            r.prompt_ids = std::move(seq->prompt);
            r.new_ids = std::move(seq->output);
            r.prompt_last_logits = std::move(seq->prompt_last_logits);
            r.finish_reason = seq->finish_reason == FinishReason::kNone ? unfinished : seq->finish_reason;
        }
    };
    while (engine.hasWork()) {
        if (cancelled && cancelled()) {
            run.status = core::makeStatus(core::StatusCode::kCancelled, "generation cancelled");
            std::vector<std::unique_ptr<Sequence>> left = engine.failAll(run.status);
            for (auto& seq : left) seq->finish_reason = FinishReason::kAborted;
            collect(left, FinishReason::kAborted);
            break;
        }
        StepOutput out = engine.runStep();
        collect(out.finished, FinishReason::kError);
        if (!out.error.isOk()) {
            run.status = out.error;
            std::vector<std::unique_ptr<Sequence>> left = engine.failAll(out.error);
            collect(left, FinishReason::kError);
            break;
        }
    }
    const core::Status finish = engine.finish();
    if (run.status.isOk()) run.status = finish;
    return run;
}

}  // namespace afd::attention
