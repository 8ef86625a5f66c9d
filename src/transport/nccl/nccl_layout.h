// Where a frame sits in one of the nccl connector's receive slots. A slot holds one frame of a (stage, peer): the
// 16-byte header first, then each segment at a multiple of kNcclSlotAlignment bytes, sized for the agreed maximum rows,
// so the views handed out stay put whatever the rows of a frame. Both ends send and receive a frame as the header and
// then one transfer per non-empty segment, in segment order.
#pragma once

#include <array>
#include <cstdint>

#include "core/status.h"
#include "transport/frame.h"

namespace afd::transport::nccl {

inline constexpr uint64_t kNcclSlotAlignment = 256;
inline constexpr int kMaxNcclSegments = 4;

struct NcclSlotLayout {
    int count = 0;                                       // segments
    std::array<uint64_t, kMaxNcclSegments> offsets{};    // from the slot's start; the header is at 0
    std::array<uint64_t, kMaxNcclSegments> row_bytes{};  // bytes of one row of the segment
    uint64_t bytes = 0;                                  // the slot's size (a multiple of kNcclSlotAlignment)

    // Bytes of segment `s` in a frame of `rows` rows.
    uint64_t segmentBytes(int s, uint32_t rows) const { return row_bytes[static_cast<size_t>(s)] * rows; }
};

// kInvalidArgument for a spec without segments, with more than kMaxNcclSegments, or with a zero-width segment.
core::Result<NcclSlotLayout> ncclSlotLayout(const FrameSpec& spec, uint32_t max_rows);

}  // namespace afd::transport::nccl
