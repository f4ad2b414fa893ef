// Validator cases of clamping, triangles, gather/scatter and indexed
// updates (src/ops/clamp_triangle.cc, src/ops/indexing.cc).
#include "rules/cases.h"

namespace dtensor::rules {

namespace {

using dispatch::OpId;
const Shape kM{2, 4, 5};

}  // namespace

void add_index_cases(std::vector<OpCase>& c) {
  c.push_back({"clamp(-3,4)", OpId::Clamp, {{kX}},
               [](const Tensors& x) { return clamp(x[0], -3, 4); },
               [](const DTensors& x) { return clamp(x[0], -3, 4); }});
  c.push_back({"clamp_min(0.5)", OpId::Clamp, {{kX}},
               [](const Tensors& x) { return clamp_min(x[0], 0.5); },
               [](const DTensors& x) { return clamp_min(x[0], 0.5); }});
  c.push_back({"tril(1)", OpId::Tril, {{kM}},
               [](const Tensors& x) { return tril(x[0], 1); },
               [](const DTensors& x) { return tril(x[0], 1); }});
  c.push_back({"triu(-1)", OpId::Triu, {{kM}},
               [](const Tensors& x) { return triu(x[0], -1); },
               [](const DTensors& x) { return triu(x[0], -1); }});
  c.push_back({"gather(1)", OpId::Gather, {{kX}, {{4, 3, 2}, InputKind::Index, 5}},
               [](const Tensors& x) { return gather(x[0], 1, x[1]); },
               [](const DTensors& x) { return gather(x[0], 1, x[1]); }});
  c.push_back({"scatter(1)", OpId::Scatter, {{kX}, {{4, 3, 2}, InputKind::Index, 5}, {{4, 3, 2}}},
               [](const Tensors& x) { return scatter(x[0], 1, x[1], x[2]); },
               [](const DTensors& x) { return scatter(x[0], 1, x[1], x[2]); }});
  c.push_back({"scatter(1,value)", OpId::ScatterValue, {{kX}, {{4, 3, 2}, InputKind::Index, 5}},
               [](const Tensors& x) { return scatter(x[0], 1, x[1], 7); },
               [](const DTensors& x) { return scatter(x[0], 1, x[1], 7); }});
  c.push_back({"scatter_add(1)", OpId::ScatterAdd,
               {{kX}, {{4, 3, 2}, InputKind::Index, 5}, {{4, 3, 2}}},
               [](const Tensors& x) { return scatter_add(x[0], 1, x[1], x[2]); },
               [](const DTensors& x) { return scatter_add(x[0], 1, x[1], x[2]); }});
  c.push_back({"index_add(1)", OpId::IndexAdd, {{kX}, {{3}, InputKind::Index, 5}, {{4, 3, 2}}},
               [](const Tensors& x) { return index_add(x[0], 1, x[1], x[2], 2); },
               [](const DTensors& x) { return index_add(x[0], 1, x[1], x[2], 2); }});
  for (bool acc : {false, true})
    c.push_back({acc ? "index_put(:,i,acc)" : "index_put(:,i)", OpId::IndexPut,
                 {{kX}, {{3}, InputKind::Index, 5}, {{4, 3, 2}}},
                 [acc](const Tensors& x) { return index_put(x[0], {std::nullopt, x[1]}, x[2], acc); },
                 [acc](const DTensors& x) {
                   return index_put(x[0], {std::nullopt, x[1]}, x[2], acc);
                 }});
}

}  // namespace dtensor::rules
