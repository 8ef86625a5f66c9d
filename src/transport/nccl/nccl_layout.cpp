#include "transport/nccl/nccl_layout.h"

#include "transport/nccl/nccl_device.h"

namespace afd::transport::nccl {
namespace {

uint64_t alignUp(uint64_t v) { return (v + kNcclSlotAlignment - 1) / kNcclSlotAlignment * kNcclSlotAlignment; }

}  // namespace

core::Result<NcclSlotLayout> ncclSlotLayout(const FrameSpec& spec, uint32_t max_rows) {
    if (spec.segments.empty() || spec.segments.size() > static_cast<size_t>(kMaxNcclSegments)) {
        return core::invalidArgument("nccl frames carry 1..{} segments, this one {}", kMaxNcclSegments,
                                     spec.segments.size());
    }
    NcclSlotLayout l;
    l.count = static_cast<int>(spec.segments.size());
    uint64_t at = alignUp(sizeof(NcclFrameHeader));
    for (size_t s = 0; s < spec.segments.size(); ++s) {
        const SegmentSpec& segment = spec.segments[s];
        if (segment.cols == 0) return core::invalidArgument("nccl frame segment {} has no columns", s);
        l.offsets[s] = at;
        l.row_bytes[s] = uint64_t{segment.cols} * core::dtypeSize(segment.dtype);
        at = alignUp(at + l.row_bytes[s] * max_rows);
    }
    l.bytes = at;
    return l;
}

}  // namespace afd::transport::nccl
