// Tensor: dtype, shape, device and a data pointer, owning or not.
//
// Ownership: an owning tensor keeps its storage alive through a shared_ptr (its own allocation, an mmap'd
// checkpoint, a device buffer); a view (Tensor::view) borrows memory that the caller keeps alive. Copies of a
// Tensor share storage; no copy of the elements happens implicitly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"

namespace afd::core {

enum class DeviceType { kCpu, kCuda };

struct Device {
    DeviceType type = DeviceType::kCpu;
    int index = 0;

    static Device cpu() { return {DeviceType::kCpu, 0}; }
    static Device cuda(int index) { return {DeviceType::kCuda, index}; }
    bool isCpu() const { return type == DeviceType::kCpu; }
    bool operator==(const Device&) const = default;
    std::string toString() const;
};

using Shape = std::vector<int64_t>;
std::string shapeToString(const Shape& shape);
int64_t shapeNumel(const Shape& shape);

class Tensor {
public:
    Tensor() = default;

    // Allocates CPU memory (64-byte aligned), uninitialised.
    static Tensor empty(DType dtype, Shape shape);
    // Allocates CPU memory filled with zero bytes.
    static Tensor zeros(DType dtype, Shape shape);
    // Borrows `data`; the caller keeps it alive for as long as the view and its copies are used.
    static Tensor view(void* data, DType dtype, Shape shape, Device device = Device::cpu());
    // Shares ownership of `owner`, which keeps `data` alive (an mmap'd file, a device allocation …).
    static Tensor wrap(void* data, DType dtype, Shape shape, Device device, std::shared_ptr<void> owner);

    bool defined() const { return data_ != nullptr || numel() == 0; }
    DType dtype() const { return dtype_; }
    const Shape& shape() const { return shape_; }
    int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
    int64_t size(int64_t axis) const;
    int64_t numel() const { return shapeNumel(shape_); }
    size_t nbytes() const { return static_cast<size_t>(numel()) * dtypeSize(dtype_); }
    Device device() const { return device_; }
    bool isOwning() const { return owner_ != nullptr; }

    void* rawData() const { return data_; }
    template <typename T>
    T* data() const {
        AFD_CHECK(sizeof(T) == dtypeSize(dtype_), "tensor element size {} does not match requested type size {}",
                  dtypeSize(dtype_), sizeof(T));
        return static_cast<T*>(data_);
    }

    // Rows [begin, end) of the first axis, sharing storage.
    Tensor slice(int64_t begin, int64_t end) const;
    // Same storage with another shape of the same element count.
    Tensor reshape(Shape shape) const;

private:
    DType dtype_ = DType::kF32;
    Shape shape_;
    Device device_;
    void* data_ = nullptr;
    std::shared_ptr<void> owner_;
};

}  // namespace afd::core
