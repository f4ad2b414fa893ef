// Validator cases of the matrix products (src/ops/matmul.cc). The inner
// dim is 4, so that on 3 ranks its shards are 2, 2 and 0.
#include "rules/cases.h"

namespace dtensor::rules {

void add_matmul_cases(std::vector<OpCase>& c) {
  using dispatch::OpId;
  c.push_back({"mm", OpId::Mm, {{{5, 4}}, {{4, 3}}},
               [](const Tensors& x) { return mm(x[0], x[1]); },
               [](const DTensors& x) { return mm(x[0], x[1]); }});
  c.push_back({"addmm", OpId::Addmm, {{{3}}, {{5, 4}}, {{4, 3}}},
               [](const Tensors& x) { return addmm(x[0], x[1], x[2], 1, 2); },
               [](const DTensors& x) { return addmm(x[0], x[1], x[2], 1, 2); }});
  c.push_back({"bmm", OpId::Bmm, {{{2, 5, 4}}, {{2, 4, 3}}},
               [](const Tensors& x) { return bmm(x[0], x[1]); },
               [](const DTensors& x) { return bmm(x[0], x[1]); }});
  c.push_back({"baddbmm", OpId::Baddbmm, {{{5, 3}}, {{2, 5, 4}}, {{2, 4, 3}}},
               [](const Tensors& x) { return baddbmm(x[0], x[1], x[2]); },
               [](const DTensors& x) { return baddbmm(x[0], x[1], x[2]); }});
  c.push_back({"matmul", OpId::Matmul, {{{2, 5, 4}}, {{4, 3}}},
               [](const Tensors& x) { return matmul(x[0], x[1]); },
               [](const DTensors& x) { return matmul(x[0], x[1]); }});
  c.push_back({"matmul_vec", OpId::Matmul, {{{5, 4}}, {{4}}},
               [](const Tensors& x) { return matmul(x[0], x[1]); },
               [](const DTensors& x) { return matmul(x[0], x[1]); }});
  c.push_back({"linear", OpId::Linear, {{{2, 5, 4}}, {{3, 4}}, {{3}}},
               [](const Tensors& x) { return linear(x[0], x[1], x[2]); },
               [](const DTensors& x) { return linear(x[0], x[1], x[2]); }});
}

}  // namespace dtensor::rules
