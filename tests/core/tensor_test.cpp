#include "core/tensor.h"

#include <gtest/gtest.h>

#include "core/mapped_file.h"
#include "core/thread_pool.h"
#include "core/unique_fd.h"

#include <fcntl.h>
#include <unistd.h>
#include <atomic>
#include <cstdio>
#include <fstream>

namespace afd::core {
namespace {

TEST(Tensor, EmptyZerosAndSlices) {
    Tensor t = Tensor::zeros(DType::kF32, {4, 3});
    EXPECT_TRUE(t.isOwning());
    EXPECT_EQ(t.numel(), 12);
    EXPECT_EQ(t.nbytes(), 48u);
    float* p = t.data<float>();
    for (int i = 0; i < 12; ++i) EXPECT_EQ(p[i], 0.0f);
    p[3] = 5.0f;
    Tensor row1 = t.slice(1, 3);
    EXPECT_EQ(row1.shape(), (Shape{2, 3}));
    EXPECT_EQ(row1.data<float>()[0], 5.0f);
    EXPECT_THROW(t.slice(2, 5), Error);
    EXPECT_THROW((void)t.data<uint16_t>(), Error);
    EXPECT_EQ(t.reshape({12}).size(0), 12);
    EXPECT_THROW(t.reshape({5}), Error);
}

TEST(Tensor, ViewDoesNotOwn) {
    float buf[6] = {1, 2, 3, 4, 5, 6};
    Tensor v = Tensor::view(buf, DType::kF32, {2, 3});
    EXPECT_FALSE(v.isOwning());
    EXPECT_EQ(v.data<float>()[5], 6.0f);
    EXPECT_EQ(shapeToString(v.shape()), "[2, 3]");
}

TEST(DType, NamesRoundTrip) {
    for (auto d : {DType::kBf16, DType::kF32, DType::kI64, DType::kF8E4M3, DType::kBool}) {
        auto parsed = parseDType(dtypeName(d));
        ASSERT_TRUE(parsed.has_value());
        EXPECT_EQ(*parsed, d);
    }
    EXPECT_FALSE(parseDType("FP32").has_value());
    EXPECT_EQ(dtypeSize(DType::kBf16), 2u);
}

TEST(MappedFile, MapsAndReportsMissing) {
    char path[] = "/tmp/afd_mapped_XXXXXX";
    UniqueFd fd(mkstemp(path));
    ASSERT_TRUE(fd.valid());
    ASSERT_EQ(::write(fd.get(), "hello", 5), 5);
    auto mapped = MappedFile::open(path);
    ASSERT_TRUE(mapped.isOk()) << mapped.status().toString();
    EXPECT_EQ((*mapped)->size(), 5u);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>((*mapped)->data()), 5), "hello");
    ::unlink(path);
    auto missing = MappedFile::open("/nonexistent/afd/file");
    EXPECT_FALSE(missing.isOk());
    EXPECT_NE(missing.status().message().find("/nonexistent/afd/file"), std::string::npos);
}

TEST(ThreadPool, CoversRangeExactlyOnce) {
    ThreadPool pool(3);
    for (int64_t n : {1, 2, 7, 1000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.parallelFor(n, 1, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
        });
        for (auto& h : hits) EXPECT_EQ(h.load(), 1);
    }
}

}  // namespace
}  // namespace afd::core
