// The in-register transposes (src/tensor/transpose.h) against an element-
// by-element reference: first transpose_tile itself, for every element size
// (1, 2, 4, 8 bytes), ragged sizes and negative strides; then the tensor ops
// that stage tiles through it (a transposing or permuting contiguous(), a
// copy into a transposed view, a.t() + b) for every dtype, on odd shapes, at
// 1, 2, 3 and 8 threads and on every SIMD level the CPU has. Inputs are
// random bytes, so float NaN payloads and denormals must come through
// unchanged: the expected results are exact.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dtensor/tensor.h"
#include "dtensor/threads.h"
#include "tensor/loops.h"
#include "tensor/simd_threads.h"
#include "tensor/transpose.h"

using namespace dtensor;

namespace {

using detail::SimdLevel;

using TransposeTest = dtensor::testing::ThreadsAndSimdTest;

std::vector<unsigned char> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<unsigned char> out(n);
  for (unsigned char& b : out) b = static_cast<unsigned char>(gen());
  return out;
}

TEST_F(TransposeTest, TileMatchesAScalarCopy) {
  const int64_t sizes[] = {0, 1, 3, 4, 7, 8, 9, 16, 17, 31, 32, 33};
  for (SimdLevel level : dtensor::testing::simd_levels()) {
    detail::set_simd_level(level);
    for (int64_t item : {1, 2, 4, 8}) {
      for (int64_t rows : sizes) {
        for (int64_t cols : sizes) {
          for (int variant = 0; variant < 4; ++variant) {
            // rows of src padded by 3 elements; dst rows by 5, walked
            // backwards when flip (a negative stride). With stream, dst
            // rows are padded to 32 bytes and dst is 64-byte aligned, so
            // the non-temporal stores must be taken.
            const bool flip = variant & 1, stream = variant & 2;
            const int64_t ss = (cols + 3) * item;
            const int64_t ds = stream ? ((rows + 5) * item + 31) / 32 * 32 : (rows + 5) * item;
            const std::vector<unsigned char> src =
                random_bytes(static_cast<size_t>(std::max<int64_t>(rows, 1) * ss), 7);
            std::vector<unsigned char> buffer(static_cast<size_t>(std::max<int64_t>(cols, 1) * ds + 64), 0);
            unsigned char* dst = buffer.data() + (64 - reinterpret_cast<uintptr_t>(buffer.data()) % 64);
            std::vector<unsigned char> want(buffer.size() - 64, 0);
            const int64_t dst0 = flip ? (cols - 1) * ds : 0, dstep = flip ? -ds : ds;
            for (int64_t r = 0; r < rows; ++r) {
              for (int64_t c = 0; c < cols; ++c) {
                std::memcpy(&want[dst0 + c * dstep + r * item], &src[r * ss + c * item], item);
              }
            }
            const bool streamed = detail::transpose_tile(
                item, reinterpret_cast<const char*>(src.data()), ss,
                reinterpret_cast<char*>(dst) + (cols > 0 ? dst0 : 0), dstep, rows, cols, stream);
            const std::string what = std::to_string(item) + "-byte, " + std::to_string(rows) + "x" +
                                     std::to_string(cols) + (flip ? ", negative stride" : "") +
                                     (stream ? ", streamed" : "") + ", level " +
                                     detail::simd_level_name(level);
            ASSERT_EQ(std::vector<unsigned char>(dst, dst + want.size()), want) << what;
            ASSERT_EQ(streamed, stream) << what;
          }
        }
      }
    }
  }
}

// A tensor of random bits (0/1 for bool).
Tensor random_tensor(const Shape& shape, DType dtype, uint32_t seed) {
  Tensor t = Tensor::empty(shape, dtype);
  std::vector<unsigned char> bytes = random_bytes(static_cast<size_t>(t.nbytes()), seed);
  if (dtype == DType::Bool) {
    for (unsigned char& b : bytes) b &= 1;
  }
  std::memcpy(t.raw_data(), bytes.data(), bytes.size());
  return t;
}

// x's elements in row-major order of its (possibly permuted) view, read
// through its strides one at a time.
std::vector<unsigned char> scalar_contiguous(const Tensor& x) {
  const int64_t item = static_cast<int64_t>(x.itemsize());
  std::vector<unsigned char> out(static_cast<size_t>(x.numel() * item));
  const char* base = static_cast<const char*>(x.raw_data());
  std::vector<int64_t> idx(x.shape().size(), 0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * x.strides()[d];
    std::memcpy(&out[i * item], base + off * item, item);
    for (int64_t d = static_cast<int64_t>(idx.size()) - 1; d >= 0; --d) {
      if (++idx[d] < x.shape()[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

std::vector<unsigned char> bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const unsigned char*>(c.raw_data());
  return {p, p + c.nbytes()};
}

// Runs check() at every level and thread count.
template <class F>
void everywhere(const F& check) {
  for (SimdLevel level : dtensor::testing::simd_levels()) {
    detail::set_simd_level(level);
    for (int threads : {1, 2, 3, 8}) {
      set_num_threads(threads);
      check(std::string(" at ") + std::to_string(threads) + " threads, level " +
            detail::simd_level_name(level));
    }
  }
}

TEST_F(TransposeTest, CopiesMatchAScalarWalk) {
  for (DType dtype : {DType::Bool, DType::Int64, DType::Float32, DType::Float64}) {
    const std::string name = std::string(" (") + dtype_name(dtype) + ")";
    const Tensor a = random_tensor({517, 333}, dtype, 1);
    const Tensor small = random_tensor({45, 37}, dtype, 2);
    const Tensor c3 = random_tensor({37, 61, 43}, dtype, 3);
    const std::vector<unsigned char> at = scalar_contiguous(a.t());
    const std::vector<unsigned char> st = scalar_contiguous(small.t());
    const std::vector<unsigned char> p3 = scalar_contiguous(c3.permute({2, 0, 1}));
    const std::vector<unsigned char> stepped = scalar_contiguous(a.t().slice(1, 0, 517, 2));
    everywhere([&](const std::string& where) {
      EXPECT_EQ(bytes_of(a.t().contiguous()), at) << "a.t().contiguous()" << name << where;
      EXPECT_EQ(bytes_of(small.t().contiguous()), st) << "small.t().contiguous()" << name << where;
      EXPECT_EQ(bytes_of(c3.permute({2, 0, 1}).contiguous()), p3) << "permute" << name << where;
      EXPECT_EQ(bytes_of(a.t().slice(1, 0, 517, 2).contiguous()), stepped)
          << "stepped transposed slice" << name << where;
      // operand 0 staged: the kernel writes the tile buffer, which is then
      // transposed out
      Tensor y = Tensor::zeros({517, 333}, dtype);
      y.t().copy_(a.t().contiguous());
      EXPECT_EQ(bytes_of(y), bytes_of(a)) << "copy into a transposed view" << name << where;
      // a destination whose rows start one element past alignment
      Tensor padded = Tensor::zeros({333, 518}, dtype);
      padded.slice(1, 1, 518).copy_(a.t());
      EXPECT_EQ(bytes_of(padded.slice(1, 1, 518)), at) << "copy into a padded view" << name << where;
    });
  }
}

TEST_F(TransposeTest, AddOfATransposeMatchesAScalarLoop) {
  for (DType dtype : {DType::Int64, DType::Float32, DType::Float64}) {
    const Tensor a = mul(Tensor::randn({333, 517}, 4), 100.0).to(dtype);
    const Tensor b = mul(Tensor::randn({517, 333}, 5), 100.0).to(dtype);
    const Tensor want = add(a.t().contiguous(), b);  // both operands unit-stride
    // the reference itself, element by element
    const std::vector<double> av = a.to(DType::Float64).to_vector<double>();
    const std::vector<double> bv = b.to(DType::Float64).to_vector<double>();
    const std::vector<double> wv = want.to(DType::Float64).to_vector<double>();
    for (int64_t i = 0; i < 517; ++i) {
      for (int64_t j = 0; j < 333; ++j) {
        const double x = av[j * 517 + i], y = bv[i * 333 + j];
        const double sum = dtype == DType::Float32 ? static_cast<double>(static_cast<float>(x) +
                                                                         static_cast<float>(y))
                                                   : x + y;
        ASSERT_EQ(wv[i * 333 + j], sum) << i << "," << j << " " << dtype_name(dtype);
      }
    }
    everywhere([&](const std::string& where) {
      EXPECT_EQ(bytes_of(add(a.t(), b)), bytes_of(want)) << dtype_name(dtype) << where;
      EXPECT_EQ(bytes_of(add(b, a.t())), bytes_of(want)) << dtype_name(dtype) << where;
    });
  }
}

// The non-temporal output paths of copies (loops.h, kStreamBytes) on small
// tensors: with the threshold at 0 every tiled walk streams its output.
// Same-dtype copies take walk_moves (transpose_tile's streaming blocks where
// the output rows are aligned, plain stores elsewhere), converting ones
// the tile buffer and stream_row (streaming stores for rows of a multiple
// of 16 bytes, the memcpy fallback for the others); all must give the
// scalar walk's bytes. {40, 1030} has more than walk_moves' 1024 columns
// per band, {1030, 40} more rows than a band.
TEST_F(TransposeTest, StreamedOutputsMatchAScalarWalk) {
  struct Threshold {
    int64_t before = detail::stream_bytes.exchange(0);
    ~Threshold() { detail::stream_bytes = before; }
  } threshold;
  for (DType dtype : {DType::Bool, DType::Int64, DType::Float32, DType::Float64}) {
    const std::string name = std::string(" (") + dtype_name(dtype) + ")";
    for (const Shape& shape : {Shape{512, 96}, Shape{96, 512}, Shape{517, 333}, Shape{64, 48},
                               Shape{40, 1030}, Shape{1030, 40}}) {
      const Tensor a = random_tensor(shape, dtype, 7);
      // b holds no NaN: which payload a sum of two NaNs returns depends on
      // the operand order the compiler chose for that loop (its vector body
      // or its scalar tail, which cover different elements here and in the
      // reference), and IEEE 754 leaves it open. A NaN in a alone comes
      // through either way.
      const Tensor b = dtype == DType::Bool
                           ? random_tensor({shape[1], shape[0]}, dtype, 8)
                           : mul(Tensor::randn({shape[1], shape[0]}, 8), 100.0).to(dtype);
      const std::vector<unsigned char> at = scalar_contiguous(a.t());
      const std::vector<unsigned char> p3 = scalar_contiguous(a.view({shape[0], shape[1], 1}).permute({1, 2, 0}));
      everywhere([&](const std::string& where) {
        const std::string what = " of " + to_string(shape) + name + where;
        EXPECT_EQ(bytes_of(a.t().contiguous()), at) << "a.t().contiguous()" << what;
        EXPECT_EQ(bytes_of(a.view({shape[0], shape[1], 1}).permute({1, 2, 0}).contiguous()), p3)
            << "permute" << what;
        const DType other = dtype == DType::Float64 ? DType::Float32 : DType::Float64;
        EXPECT_EQ(bytes_of(a.t().to(other)), bytes_of(a.t().contiguous().to(other)))
            << "converting copy" << what;
        if (dtype != DType::Bool) {
          // a.t() + b against the sum of two unit-stride operands
          const Tensor want = add(a.t().contiguous(), b);
          EXPECT_EQ(bytes_of(add(a.t(), b)), bytes_of(want)) << "a.t() + b" << what;
        }
      });
    }
  }
}

}  // namespace
