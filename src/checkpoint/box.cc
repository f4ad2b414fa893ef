#include "checkpoint/box.h"

#include <algorithm>

#include "dtensor/error.h"

namespace dtensor::checkpoint::detail {

int64_t Box::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;  // bounded by the tensor's numel, checked when made
  return n;
}

std::optional<Box> intersect(const Box& a, const Box& b) {
  Box out;
  out.offsets.resize(a.offsets.size());
  out.sizes.resize(a.offsets.size());
  for (size_t d = 0; d < a.offsets.size(); ++d) {
    const int64_t lo = std::max(a.offsets[d], b.offsets[d]);
    const int64_t hi = std::min(a.offsets[d] + a.sizes[d], b.offsets[d] + b.sizes[d]);
    if (hi <= lo) return std::nullopt;
    out.offsets[d] = lo;
    out.sizes[d] = hi - lo;
  }
  return out;
}

namespace {

// A box of the signed sum: boxes[box] (or the whole, at index n) with sign.
struct Signed {
  size_t box;
  int sign;
};

// Whether the signed boxes `items`, restricted to dims [dim, ndim), sum to
// zero everywhere; when not, at[dim..] get coordinates near where they do not.
bool sums_to_zero(const std::vector<const Box*>& boxes, const std::vector<Signed>& items,
                  size_t dim, Shape& at) {
  if (dim == at.size()) {
    int64_t sum = 0;
    for (const Signed& s : items) sum += s.sign;
    return sum == 0;
  }
  struct Event {
    int64_t at;
    Signed item;
  };
  std::vector<Event> events;
  events.reserve(items.size() * 2);
  for (const Signed& s : items) {
    const Box& b = *boxes[s.box];
    events.push_back({b.offsets[dim], s});
    events.push_back({b.offsets[dim] + b.sizes[dim], {s.box, -s.sign}});
  }
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return a.at != b.at ? a.at < b.at : a.item.box < b.item.box;
  });
  std::vector<Signed> change;
  for (size_t i = 0; i < events.size();) {
    change.clear();
    size_t j = i;
    for (; j < events.size() && events[j].at == events[i].at; ++j) change.push_back(events[j].item);
    if (!sums_to_zero(boxes, change, dim + 1, at)) {
      at[dim] = events[i].at;
      return false;
    }
    i = j;
  }
  return true;
}

bool contains(const Box& b, const Shape& p) {
  for (size_t d = 0; d < p.size(); ++d)
    if (p[d] < b.offsets[d] || p[d] >= b.offsets[d] + b.sizes[d]) return false;
  return true;
}

}  // namespace

std::optional<Shape> miscovered_element(const std::vector<Box>& boxes, const Box& whole) {
  std::vector<const Box*> all;
  std::vector<Signed> items;
  for (const Box& b : boxes)
    if (b.numel() > 0) {
      items.push_back({all.size(), 1});
      all.push_back(&b);
    }
  if (whole.numel() > 0) {
    items.push_back({all.size(), -1});
    all.push_back(&whole);
  }
  const size_t nd = whole.sizes.size();
  Shape at(nd, 0);
  if (sums_to_zero(all, items, 0, at)) return std::nullopt;
  // The coverage changes at `at` in every dim: one of the corners just
  // below it (at - e, e in {0, 1}^nd) is covered a wrong number of times.
  for (uint64_t e = 0; e < (uint64_t{1} << nd); ++e) {
    Shape p = at;
    bool inside = true;
    for (size_t d = 0; d < nd; ++d) {
      if ((e >> d) & 1) --p[d];
      inside = inside && p[d] >= whole.offsets[d] && p[d] < whole.offsets[d] + whole.sizes[d];
    }
    if (!inside) continue;
    int64_t count = 0;
    for (const Box& b : boxes)
      if (b.numel() > 0 && contains(b, p)) ++count;
    if (count != 1) return p;
  }
  DT_THROW("checkpoint: internal error: the chunks do not tile the tensor, yet no element "
           "near ", to_string(at), " shows it");
}

Shape strides_of(const Shape& sizes) {
  Shape strides(sizes.size(), 0);
  int64_t s = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    strides[d] = s;
    s *= sizes[d];
  }
  return strides;
}

RunIter::RunIter(const Box& inner, const Box& src, const Box& dst, size_t itemsize) {
  const size_t nd = inner.sizes.size();
  const auto item = static_cast<int64_t>(itemsize);
  inner_sizes_ = inner.sizes;
  src_strides_ = strides_of(src.sizes);
  dst_strides_ = strides_of(dst.sizes);
  for (int64_t& s : src_strides_) s *= item;
  for (int64_t& s : dst_strides_) s *= item;
  // Dims from the back that inner covers whole in both boxes merge into one
  // run; the dim before them contributes its inner length to the run too.
  int64_t d = static_cast<int64_t>(nd);
  while (d > 0) {
    const auto k = static_cast<size_t>(d - 1);
    if (inner.sizes[k] != src.sizes[k] || inner.sizes[k] != dst.sizes[k]) break;
    --d;
  }
  merged_ = d == 0 ? 0 : d - 1;
  int64_t run = item;
  for (size_t k = static_cast<size_t>(merged_); k < nd; ++k) run *= inner.sizes[k];
  run_.bytes = run;
  src_start_.resize(nd);
  dst_start_.resize(nd);
  for (size_t k = 0; k < nd; ++k) {
    src_start_[k] = inner.offsets[k] - src.offsets[k];
    dst_start_[k] = inner.offsets[k] - dst.offsets[k];
  }
  index_.resize(static_cast<size_t>(merged_), 0);
  // The end of the last run: the last outer index, plus one run.
  int64_t last = 0;
  for (size_t k = 0; k < nd; ++k) {
    const int64_t i = k < static_cast<size_t>(merged_) ? inner.sizes[k] - 1 : 0;
    last += (src_start_[k] + i) * src_strides_[k];
  }
  src_end_ = last + run;
  locate();
}

void RunIter::locate() {
  int64_t s = 0, t = 0;
  for (size_t k = 0; k < src_start_.size(); ++k) {
    const int64_t i = k < index_.size() ? index_[k] : 0;
    s += (src_start_[k] + i) * src_strides_[k];
    t += (dst_start_[k] + i) * dst_strides_[k];
  }
  run_.src = s;
  run_.dst = t;
}

void RunIter::next() {
  for (int64_t k = merged_ - 1; k >= 0; --k) {
    const auto u = static_cast<size_t>(k);
    if (++index_[u] < inner_sizes_[u]) {
      locate();
      return;
    }
    index_[u] = 0;
  }
  done_ = true;
}

}  // namespace dtensor::checkpoint::detail
