// LoadProgressReporter: how a command shows the weights loading (model::LoadProgress): a bar redrawn in place on a
// terminal (stderr is a TTY), log lines at each tenth otherwise. One thread (the one loading) calls it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "model/weights.h"

namespace afd::cli {

class LoadProgressReporter {
public:
    // `what` names what loads ("attention rank 0 weights").
    explicit LoadProgressReporter(std::string what);
    ~LoadProgressReporter();  // ends the bar's line when one was drawn
    LoadProgressReporter(const LoadProgressReporter&) = delete;
    LoadProgressReporter& operator=(const LoadProgressReporter&) = delete;

    // A callback for AttentionRankOptions::on_load_progress; valid while this reporter lives.
    model::LoadProgress callback();

private:
    void update(int64_t done, int64_t total);

    const std::string what_;
    const bool tty_;
    const std::chrono::steady_clock::time_point start_;
    int64_t last_tenth_ = -1;
    bool drawn_ = false;
};

}  // namespace afd::cli
