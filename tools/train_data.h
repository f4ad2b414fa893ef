// The training data of `dtensor train`: a short English text shipped in the
// program (no download), read character by character, and batches of
// windows of it for next-character prediction.
#pragma once

#include <cstdint>
#include <string>

#include "dtensor/tensor.h"

namespace dtensor::cli {

class TextData {
 public:
  // The shipped text.
  TextData();
  explicit TextData(std::string text);

  // The distinct characters, sorted: token i is vocabulary()[i].
  const std::string& vocabulary() const { return vocab_; }
  int64_t vocab_size() const { return static_cast<int64_t>(vocab_.size()); }
  int64_t length() const { return static_cast<int64_t>(text_.size()); }

  // `batch` windows of seq + 1 characters starting at positions drawn from
  // (seed, step): ids are the first seq, targets the next character of
  // each, both int64 (batch, seq). Every process draws the same batch.
  struct Batch {
    Tensor ids, targets;
  };
  Batch batch(int64_t batch, int64_t seq, uint64_t seed, int64_t step) const;

  std::string decode(const Tensor& ids) const;

 private:
  std::string text_;
  std::string vocab_;
  Tensor tokens_;  // int64 (length)
};

}  // namespace dtensor::cli
