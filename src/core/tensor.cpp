#include "core/tensor.h"

#include <fmt/format.h>

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace afd::core {

std::string Device::toString() const { return type == DeviceType::kCpu ? "cpu" : fmt::format("cuda:{}", index); }

std::string shapeToString(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

int64_t shapeNumel(const Shape& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

Tensor Tensor::empty(DType dtype, Shape shape) {
    for (int64_t d : shape) AFD_CHECK(d >= 0, "negative dimension in shape {}", shapeToString(shape));
    const size_t bytes = static_cast<size_t>(shapeNumel(shape)) * dtypeSize(dtype);
    // Large buffers are 2 MiB aligned and asked to use transparent huge pages: first touch then faults once per
    // 2 MiB instead of once per 4 KiB (weight packing writes hundreds of MB right after allocating).
    constexpr size_t kHugePage = size_t{2} << 20;
    const size_t alignment = bytes >= kHugePage ? kHugePage : 64;
    const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    void* ptr = rounded == 0 ? nullptr : std::aligned_alloc(alignment, rounded);
    if (rounded != 0 && ptr == nullptr) throw std::bad_alloc();
    if (alignment == kHugePage) (void)::madvise(ptr, rounded, MADV_HUGEPAGE);  // a hint: failure changes nothing
    Tensor t;
    t.dtype_ = dtype;
    t.shape_ = std::move(shape);
    t.data_ = ptr;
    t.owner_ = std::shared_ptr<void>(ptr, [](void* p) { std::free(p); });
    return t;
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
    Tensor t = empty(dtype, std::move(shape));
    if (t.nbytes() > 0) std::memset(t.data_, 0, t.nbytes());
    return t;
}

Tensor Tensor::view(void* data, DType dtype, Shape shape, Device device) {
    Tensor t;
    t.dtype_ = dtype;
    t.shape_ = std::move(shape);
    t.device_ = device;
    t.data_ = data;
    return t;
}

Tensor Tensor::wrap(void* data, DType dtype, Shape shape, Device device, std::shared_ptr<void> owner) {
    Tensor t = view(data, dtype, std::move(shape), device);
    t.owner_ = std::move(owner);
    return t;
}

int64_t Tensor::size(int64_t axis) const {
    if (axis < 0) axis += dim();
    AFD_CHECK(axis >= 0 && axis < dim(), "axis {} out of range for shape {}", axis, shapeToString(shape_));
    return shape_[static_cast<size_t>(axis)];
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
    AFD_CHECK(dim() >= 1 && begin >= 0 && begin <= end && end <= shape_[0], "bad slice [{}, {}) of shape {}", begin,
              end, shapeToString(shape_));
    Tensor t = *this;
    const int64_t row = shape_[0] == 0 ? 0 : numel() / shape_[0];
    t.shape_[0] = end - begin;
    t.data_ = static_cast<char*>(data_) + static_cast<size_t>(begin * row) * dtypeSize(dtype_);
    return t;
}

Tensor Tensor::reshape(Shape shape) const {
    AFD_CHECK(shapeNumel(shape) == numel(), "cannot reshape {} to {}", shapeToString(shape_), shapeToString(shape));
    Tensor t = *this;
    t.shape_ = std::move(shape);
    return t;
}

}  // namespace afd::core
