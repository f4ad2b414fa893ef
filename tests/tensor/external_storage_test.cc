// Storage adopting memory it does not own (the Python module wraps NumPy
// arrays and DLPack tensors this way): no copy, writes seen both ways, the
// owner released exactly once when the last view dies, never freed into
// the allocator.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "dtensor/tensor.h"

namespace dtensor {
namespace {

TEST(ExternalStorage, AliasesTheMemoryAndReleasesTheOwnerOnce) {
  auto buffer = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5, 6});
  int released = 0;
  float* data = buffer->data();
  {
    std::shared_ptr<void> owner(buffer.get(), [&released, keep = buffer](void*) mutable {
      ++released;
      keep.reset();
    });
    auto storage = std::make_shared<Storage>(data, 6 * sizeof(float), std::move(owner));
    EXPECT_TRUE(storage->is_external());
    Tensor t(storage, DType::Float32, {2, 3}, {3, 1}, 0);
    storage.reset();
    EXPECT_EQ(t.data_ptr<float>(), data);
    Tensor col = t.narrow(1, 1, 1);  // a view keeps the owner too
    t = Tensor();
    EXPECT_EQ(released, 0);
    col.mul_(10.0);
    EXPECT_EQ((*buffer)[1], 20);
    EXPECT_EQ((*buffer)[4], 50);
    (*buffer)[0] = -1;
    Tensor sum_all = sum(col);
    EXPECT_EQ(sum_all.item<double>(), 70);
    EXPECT_EQ(released, 0);
  }
  EXPECT_EQ(released, 1);
}

TEST(ExternalStorage, ViewsMayNotReachOutsideTheAdoptedBytes) {
  std::vector<int64_t> v(4, 7);
  auto storage = std::make_shared<Storage>(v.data(), 4 * sizeof(int64_t),
                                           std::shared_ptr<void>(v.data(), [](void*) {}));
  EXPECT_THROW(Tensor(storage, DType::Int64, {5}, {1}, 0), Error);
  EXPECT_EQ(Tensor(storage, DType::Int64, {2, 2}, {2, 1}, 0).to_vector<int64_t>(),
            (std::vector<int64_t>{7, 7, 7, 7}));
}

TEST(ExternalStorage, NeedsAnOwner) {
  float x = 0;
  EXPECT_THROW(Storage(&x, sizeof(x), nullptr), Error);
}

}  // namespace
}  // namespace dtensor
