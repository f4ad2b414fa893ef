// The dense tensor layer in ten lines: creation, views, broadcasting,
// matmul through BLAS, reductions and softmax. Run: build/bin/example_tensor_basics
#include <iostream>

#include <dtensor/tensor.h>

int main() {
  using namespace dtensor;
  Tensor x = Tensor::randn({4, 8}, /*seed=*/0);       // counter-based: same seed, same values
  Tensor w = Tensor::randn({16, 8}, /*seed=*/1);
  Tensor b = Tensor::zeros({16});
  Tensor h = gelu(linear(x, w, b));                    // x @ w^T + b, then GELU: (4, 16)
  Tensor p = softmax(h, /*dim=*/-1);                   // each row sums to 1
  Tensor row_sums = sum(p, {1});
  std::cout << "h: " << h.shape() << "  row sums: " << row_sums << "\n";
  Tensor top = argmax(p, 1);                           // int64 class per row
  std::cout << "argmax per row: " << top << "\n";
  return allclose(row_sums, Tensor::ones({4}), 1e-5, 1e-6) ? 0 : 1;
}
