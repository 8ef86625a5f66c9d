#include "attention/offline.h"

#include <map>

namespace afd::attention {

core::Result<std::vector<GenerationResult>> generateOffline(Engine& engine,
                                                            const std::vector<std::vector<int32_t>>& prompts,
                                                            const SamplingParams& params, bool want_prompt_logits,
                                                            const std::function<bool()>& cancelled) {
    auto run = [&]() -> core::Result<std::vector<GenerationResult>> {
        std::map<int64_t, size_t> index_of;
        for (size_t i = 0; i < prompts.size(); ++i) {
            AFD_ASSIGN_OR_RETURN(int64_t id, engine.addRequest(prompts[i], params, want_prompt_logits));
            index_of[id] = i;
        }
        std::vector<GenerationResult> results(prompts.size());
        while (engine.hasWork()) {
            if (cancelled && cancelled()) return core::makeStatus(core::StatusCode::kCancelled, "generation cancelled");
            AFD_ASSIGN_OR_RETURN(auto finished, engine.step());
            for (auto& seq : finished) {
                GenerationResult& r = results[index_of.at(seq->id)];
                r.prompt_ids = std::move(seq->prompt);
                r.new_ids = std::move(seq->output);
                r.prompt_last_logits = std::move(seq->prompt_last_logits);
                r.finish_reason = seq->finish_reason;
            }
        }
        return results;
    };
    core::Result<std::vector<GenerationResult>> results = run();
    const core::Status finish = engine.finish();
    if (!results.isOk()) return results;
    if (!finish.isOk()) return finish;
    return results;
}

}  // namespace afd::attention
