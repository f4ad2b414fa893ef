// The shipped text and its batches (train_data.h).
#include "train_data.h"

#include <algorithm>
#include <array>
#include <vector>

#include "dtensor/error.h"

namespace dtensor::cli {

namespace {

// Written for this project: plain prose about the library itself, with
// enough repetition of words and phrases that a small model learns it.
constexpr const char* kText =
    R"(A distributed tensor is one logical tensor laid out over a mesh of ranks.
Each mesh dim has a placement. A shard placement splits a tensor dim over the
ranks of the mesh dim. A replicate placement keeps the whole tensor on every
rank of the mesh dim. A partial placement keeps a piece on every rank, and the
logical value is the sum of the pieces, or their average, their maximum or
their minimum. Every operation on a distributed tensor propagates the layout of
its inputs to the layout of its output, and moves data with collectives only
where the layout needs it. An all gather turns a shard into a replicate. A
reduce scatter turns a partial into a shard. An all reduce turns a partial into
a replicate. An all to all moves a shard from one tensor dim to another.

To train a model on many ranks, the parameters are laid out too. Data parallel
training keeps every parameter replicated and splits the batch; the gradients
come out partial and are reduced. Fully sharded data parallel training keeps
every parameter sharded on its first dim, gathers it before the layer runs and
scatters the gradient back to the shards. Tensor parallel training splits the
weights of each layer so that every rank computes a slice of the output, and
sequence parallel training splits the activations between the layers along the
sequence. The schemes combine on a mesh of two dims: the data parallel dim and
the tensor parallel dim.

The simulated world runs every rank in one process, and the world of many
processes runs one rank per process. A program gives the same bits in both.
The loss of the model falls as it learns the text, one character at a time,
and every step is checked against the same training on one process.
)";

}  // namespace

TextData::TextData() : TextData(kText) {}

TextData::TextData(std::string text) : text_(std::move(text)) {
  DT_CHECK(text_.size() >= 2, "training text of ", text_.size(),
           " characters: at least 2 are needed");
  std::array<bool, 256> seen{};
  for (unsigned char c : text_) seen[c] = true;
  for (int c = 0; c < 256; ++c)
    if (seen[static_cast<size_t>(c)]) vocab_ += static_cast<char>(c);
  std::vector<int64_t> ids(text_.size());
  for (size_t i = 0; i < text_.size(); ++i) ids[i] = static_cast<int64_t>(vocab_.find(text_[i]));
  tokens_ = Tensor::from_vector(ids);
}

TextData::Batch TextData::batch(int64_t batch, int64_t seq, uint64_t seed, int64_t step) const {
  DT_CHECK(seq >= 1 && seq + 1 <= length(), "--seq ", seq, " needs windows of ", seq + 1,
           " characters, but the text has ", length());
  const Tensor starts =
      Tensor::randint(0, length() - seq, {batch}, seed, static_cast<uint64_t>(step) * 4096);
  std::vector<int64_t> ids, targets;
  ids.reserve(static_cast<size_t>(batch * seq));
  targets.reserve(static_cast<size_t>(batch * seq));
  const int64_t* tok = tokens_.data_ptr<int64_t>();
  const int64_t* start = starts.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) {
      ids.push_back(tok[start[b] + s]);
      targets.push_back(tok[start[b] + s + 1]);
    }
  }
  return {Tensor::from_vector(ids, Shape{batch, seq}),
          Tensor::from_vector(targets, Shape{batch, seq})};
}

std::string TextData::decode(const Tensor& ids) const {
  DT_CHECK(ids.dtype() == DType::Int64, "decode: ids must be int64");
  const Tensor flat = ids.contiguous();
  std::string out;
  const int64_t* p = flat.data_ptr<int64_t>();
  for (int64_t i = 0; i < flat.numel(); ++i) {
    DT_CHECK(p[i] >= 0 && p[i] < vocab_size(), "decode: id ", p[i], " outside [0, ", vocab_size(),
             ")");
    out += vocab_[static_cast<size_t>(p[i])];
  }
  return out;
}

}  // namespace dtensor::cli
