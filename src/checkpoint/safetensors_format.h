// The safetensors format (Hugging Face): an 8-byte little-endian header
// length N, N bytes of JSON header (tensor name -> dtype, shape and
// data_offsets into the data buffer; "__metadata__": string -> string),
// then the data buffer. Here: its dtypes against dtensor's, dtensor Values
// as __metadata__ text, and a file's header read and validated (a file is
// input: every length, offset and size is checked before it is used).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/file_io.h"
#include "dtensor/checkpoint.h"

namespace dtensor::checkpoint::detail {

inline constexpr const char* kMetadataKey = "__metadata__";
// The largest header the reference reader accepts.
inline constexpr int64_t kMaxHeaderBytes = 100'000'000;

// A safetensors dtype: its size in bits and the dtensor DType, if any.
struct StDType {
  const char* name;
  int bits;
  bool has_dtype;
  DType dtype;
};
// The dtype named `name` ("F32"), or null when safetensors has none such.
const StDType* find_st_dtype(const std::string& name);
// "F32" for Float32; throws for a DType safetensors cannot hold.
const char* st_name(DType dtype);
// "[2, 3]"
std::string shape_text(const std::vector<int64_t>& s);

// "bool", "int64", "float64", "string", "int64[]", "float64[]".
const char* value_type(const Value& v);
// A Value as __metadata__ text: a string as it is; bool "true"/"false";
// int64 in decimal; float64 as the shortest text that reads back the same
// bits ("nan", "inf", "-inf"); lists as JSON arrays ("[1,2]", "[0.5,\"nan\"]").
std::string encode_value(const Value& v);
// The text as a Value of the type of `like`; nullopt when it is not one.
std::optional<Value> decode_value(const std::string& text, const Value& like);

// A tensor of a file: its dtype, shape and bytes [begin, end) of the data.
struct InTensor {
  const StDType* st = nullptr;
  std::vector<int64_t> shape;
  int64_t begin = 0;
  int64_t end = 0;
};

struct Header {
  int64_t data_start = 0;  // the data buffer's offset in the file
  std::map<std::string, InTensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Reads and validates the header of the file `f` (named `path` in errors):
// a sane length, valid JSON with no repeated key, known dtypes, shapes and
// byte counts that agree, tensors contiguous from the start of the data to
// the end of the file. Throws "checkpoint::import_safetensors: PATH is not
// a valid safetensors file: ...".
Header read_header(const File& f, const std::string& path);

}  // namespace dtensor::checkpoint::detail
