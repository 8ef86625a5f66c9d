// LoadProgressReporter: how a command shows the weights loading (model::LoadProgress): a bar redrawn in place on a
// terminal (stderr is a TTY), log lines at each tenth otherwise; and whether the load goes on (a stop asked for
// ends it after the layer in hand). One thread (the one loading) calls it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "model/weights.h"

namespace afd::cli {

class LoadProgressReporter {
public:
    // `what` names what loads ("attention rank 0 weights"). `stop_requested` (may be empty: never), called from the
    // loading thread after each layer, ends the load when it returns true. `test_delay_ms` (AFD_TEST_LOAD_DELAY_MS,
    // tests only): a sleep after each layer, so that a test can stop a load of a model that loads in milliseconds.
    explicit LoadProgressReporter(std::string what, std::function<bool()> stop_requested = {},
                                  int64_t test_delay_ms = 0);
    ~LoadProgressReporter();  // ends the bar's line when one was drawn
    LoadProgressReporter(const LoadProgressReporter&) = delete;
    LoadProgressReporter& operator=(const LoadProgressReporter&) = delete;

    // A callback for AttentionRankOptions::on_load_progress; valid while this reporter lives.
    model::LoadProgress callback();

private:
    void update(int64_t done, int64_t total);

    const std::string what_;
    const std::function<bool()> stop_requested_;
    const int64_t test_delay_ms_;
    const bool tty_;
    const std::chrono::steady_clock::time_point start_;
    int64_t last_tenth_ = -1;
    bool drawn_ = false;
};

}  // namespace afd::cli
