// The text of `afd bench moe --timeline` (moe_trace_summary.h).
#include "kernels/cuda/moe_trace_summary.h"

#include <fmt/core.h>

#include <algorithm>

#include "core/check.h"
#include "kernels/moe_cuda.h"

namespace afd::kernels::cuda {
namespace {

const char* traceEventName(int event) {
    static const char* const kNames[kTraceItemLog] = {"entry",      "setup",        "dependency", "first-load",
                                                      "first-data", "last-mma",     "end",        "prod-done",
                                                      "rows-ready", "gather-first", "items",      "waited"};
    return kNames[event];
}

// One line of the per-item summary: how many items, the median time each took on its SM (from the CTA's previous
// item's end to its own), and the weight bytes it streamed over that time (GB/s per SM: median, p10, p90).
std::string itemClassLine(const char* name, std::vector<double> us, std::vector<double> gbps) {
    if (us.empty()) {
        return "";
    }
    std::sort(us.begin(), us.end());
    std::sort(gbps.begin(), gbps.end());
    const size_t n = gbps.size();
    return fmt::format("    {:<26} {:5} items, {:7.2f} us each, weights {:5.1f} GB/s per SM (p10 {:.1f}, p90 {:.1f})\n",
                       name, us.size(), us[us.size() / 2], gbps[n / 2], gbps[n / 10], gbps[n * 9 / 10]);
}

// The per-item log of one kernel's CTAs (MoeTraceEvent kTraceItemLog), each CTA's first item left out (its time holds
// the pipeline's fill): the items of experts with one token tile, whose weights stream from DRAM once, apart from
// those of experts with several (their other tiles' items read the weights from L2).
template <typename At>
std::string summariseItems(At at) {
    std::vector<double> once_us;
    std::vector<double> once_gbps;
    std::vector<double> shared_us;
    std::vector<double> shared_gbps;
    for (int cta = 0; cta < kMoeTraceMaxCtas; ++cta) {
        if (at(cta, kTraceEntry) == 0) {
            continue;
        }
        const int logged = static_cast<int>(std::min<uint64_t>(at(cta, kTraceItems), kMoeTraceLoggedItems));
        for (int n = 1; n < logged; ++n) {
            const int word = kTraceItemLog + n * kMoeTraceItemWords;
            const uint64_t end = at(cta, word);
            const uint64_t prev = at(cta, word - kMoeTraceItemWords);
            if (end <= prev) {
                continue;
            }
            const double ns = static_cast<double>(end - prev);
            const bool shared = (at(cta, word + 1) >> 32) > 1;
            (shared ? shared_us : once_us).push_back(ns * 1e-3);
            (shared ? shared_gbps : once_gbps).push_back(static_cast<double>(at(cta, word + 2)) / ns);
        }
    }
    return itemClassLine("items, expert of one tile", once_us, once_gbps) +
           itemClassLine("items, expert of several", shared_us, shared_gbps);
}

// The permute and combine kernels' lines (MoeTraceLayerWord) and how much of the replay the layer's kernels span.
std::string summariseLayerWords(const uint64_t* layer, uint64_t t0, double layer_us) {
    auto first = [&](int word) { return layer[word] != 0 ? ~layer[word] : 0; };
    auto us = [&](uint64_t t) { return static_cast<double>(t - t0) * 1e-3; };
    std::string text;
    const uint64_t permute_entry = first(kTraceLayerPermuteEntry);
    if (permute_entry != 0 && layer[kTraceLayerPermuteEnd] != 0) {
        text += fmt::format("  permute  first entry {:.2f}, last end {:.2f}\n", us(permute_entry),
                            us(layer[kTraceLayerPermuteEnd]));
    }
    const uint64_t combine_entry = first(kTraceLayerCombineEntry);
    const uint64_t combine_start = first(kTraceLayerCombineStart);
    const uint64_t combine_end = layer[kTraceLayerCombineEnd];
    if (combine_entry != 0 && combine_start != 0 && combine_end != 0) {
        text += fmt::format("  combine  first entry {:.2f}, first past its wait {:.2f}, last end {:.2f}\n",
                            us(combine_entry), us(combine_start), us(combine_end));
        const double span = us(combine_end);
        text += fmt::format(
            "  kernels span {:.2f} us from the first stamp to the combine's end; the replay's other "
            "{:.2f} us are outside them (launch, events)\n",
            span, layer_us - span);
    }
    return text;
}

}  // namespace

std::string summariseMoeTrace(const std::vector<uint64_t>& stamps, double layer_us) {
    const size_t expected = kMoeTraceWords;
    AFD_CHECK(stamps.size() == expected,
              "MoE trace summary: {} stamps, expected {} (2 kernels x {} CTAs x {} slots, {} layer words)",
              stamps.size(), expected, kMoeTraceMaxCtas, kMoeTraceSlots, static_cast<int>(kMoeTraceLayerWords));
    const uint64_t* layer = stamps.data() + kMoeTraceLayerOffset;
    uint64_t t0 = layer[kTraceLayerPermuteEntry] != 0 ? ~layer[kTraceLayerPermuteEntry] : ~uint64_t{0};
    for (int k = 0; k < 2; ++k) {
        for (int cta = 0; cta < kMoeTraceMaxCtas; ++cta) {
            const uint64_t v = stamps[static_cast<size_t>((k * kMoeTraceMaxCtas + cta) * kMoeTraceSlots + kTraceEntry)];
            if (v != 0) {
                t0 = std::min(t0, v);
            }
        }
    }
    std::string text =
        fmt::format("  timeline (traced replay {:.1f} us; us from the first CTA entry, min/median/max)\n", layer_us);
    text += summariseLayerWords(layer, t0, layer_us);
    const char* const kernel_names[2] = {"gate-up", "down"};
    for (int k = 0; k < 2; ++k) {
        auto at = [&](int cta, int event) {
            return stamps[static_cast<size_t>((k * kMoeTraceMaxCtas + cta) * kMoeTraceSlots + event)];
        };
        int ran = 0;
        int with_items = 0;
        uint64_t min_items = ~uint64_t{0};
        uint64_t max_items = 0;
        for (int cta = 0; cta < kMoeTraceMaxCtas; ++cta) {
            if (at(cta, kTraceEntry) == 0) {
                continue;
            }
            ++ran;
            const uint64_t items = at(cta, kTraceItems);
            if (items > 0) {
                ++with_items;
                min_items = std::min(min_items, items);
                max_items = std::max(max_items, items);
            }
        }
        if (ran == 0) {
            continue;
        }
        text += fmt::format("  {:<8} {} CTAs, {} with items ({}..{} each)\n", kernel_names[k], ran, with_items,
                            with_items > 0 ? min_items : 0, max_items);
        for (int event = kTraceEntry; event < kTraceItems; ++event) {
            std::vector<double> us;
            for (int cta = 0; cta < kMoeTraceMaxCtas; ++cta) {
                const uint64_t v = at(cta, event);
                if (v != 0 && at(cta, kTraceEntry) != 0) {
                    us.push_back(static_cast<double>(v - t0) * 1e-3);
                }
            }
            if (us.empty()) {
                continue;
            }
            std::sort(us.begin(), us.end());
            text += fmt::format("    {:<11} {:8.2f} {:8.2f} {:8.2f}   ({} CTAs)\n", traceEventName(event), us.front(),
                                us[us.size() / 2], us.back(), us.size());
        }
        {
            std::vector<double> waited;
            for (int cta = 0; cta < kMoeTraceMaxCtas; ++cta) {
                if (at(cta, kTraceEntry) != 0 && at(cta, kTraceProducerDone) != 0) {
                    waited.push_back(static_cast<double>(at(cta, kTraceWaited)) * 1e-3);
                }
            }
            std::sort(waited.begin(), waited.end());
            if (!waited.empty() && waited.back() > 0.0) {
                text += fmt::format(
                    "    {:<11} {:8.2f} {:8.2f} {:8.2f}   us per CTA, its producer waiting for its "
                    "experts' token rows\n",
                    traceEventName(kTraceWaited), waited.front(), waited[waited.size() / 2], waited.back());
            }
        }
        text += summariseItems(at);
    }
    return text;
}

}  // namespace afd::kernels::cuda
