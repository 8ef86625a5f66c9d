// `afd bench` in an afd built without the lab (-DAFD_BUILD_BENCH=OFF): the subcommand exists and says how to get it.
// With the lab, bench/lab/cli/cmd_bench.cpp defines addBenchCommand instead (AFD_HAVE_LAB).
#if !defined(AFD_HAVE_LAB)
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "core/exit_codes.h"
#include "core/logging.h"

namespace afd::cli {

void addBenchCommand(CLI::App& app, int& exit_code) {
    CLI::App* bench =
        app.add_subcommand("bench", "GPU benchmarks (not in this build: configure with -DAFD_BUILD_BENCH=ON)");
    // `afd bench moe --tokens 1` gets the message below, not a parse error: extras are kept here, not passed up.
    bench->fallthrough(false);
    bench->allow_extras();
    bench->callback([&exit_code] {
        AFD_LOG_ERROR(
            "bench: this afd was built without the benchmark lab (bench/lab); configure with "
            "-DAFD_BUILD_BENCH=ON and rebuild");
        exit_code = core::kExitFailure;
    });
}

}  // namespace afd::cli
#endif
