// `dtensor checkpoint inspect`: what a checkpoint directory holds (format,
// world, tensors and their chunks, data files, plain values), read from its
// metadata.json, then every block checked against its checksum.
#include <charconv>
#include <cmath>
#include <iostream>
#include <sstream>
#include <variant>

#include "cli.h"
#include "output.h"
#include "dtensor/checkpoint.h"
#include "dtensor/error.h"

namespace dtensor::cli {

namespace {

using checkpoint::ChunkInfo;
using checkpoint::Metadata;
using checkpoint::TensorInfo;
using checkpoint::Value;
using nlohmann::ordered_json;

// Text from the checkpoint (a name, a file, the directory) for a line of
// the report: as it is when printable, else quoted and escaped.
std::string text_of(const std::string& s) { return is_clean_utf8(s) ? s : quote(s); }

// The shortest decimal that reads back as the same double ("0.001", "nan").
std::string double_text(double x) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(x);
}

// At most this many elements of a list value are shown in the text report.
constexpr size_t kShownElements = 8;

template <class T, class F>
std::string list_text(const char* type, const std::vector<T>& v, F element) {
  std::string out = std::string(type) + "[" + std::to_string(v.size()) + "] [";
  for (size_t i = 0; i < v.size() && i < kShownElements; ++i)
    out += (i == 0 ? "" : ", ") + element(v[i]);
  if (v.size() > kShownElements) out += ", ...";
  return out + "]";
}

// "int64 100", "float64 0.001", "string 'gpt'", "float64[2] [0.9, 0.999]".
std::string value_text(const Value& value) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) {
          return std::string("bool ") + (x ? "true" : "false");
        } else if constexpr (std::is_same_v<T, int64_t>) {
          return "int64 " + std::to_string(x);
        } else if constexpr (std::is_same_v<T, double>) {
          return "float64 " + double_text(x);
        } else if constexpr (std::is_same_v<T, std::string>) {
          return "string " + quote(x);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          return list_text("int64", x, [](int64_t e) { return std::to_string(e); });
        } else {
          return list_text("float64", x, double_text);
        }
      },
      value);
}

// A double as metadata.json writes it: a number, or "nan", "inf", "-inf".
ordered_json double_json(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return x;
}

// {"type": "int64", "value": 100}, as in metadata.json.
ordered_json value_json(const Value& value) {
  return std::visit(
      [](const auto& x) -> ordered_json {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) {
          return {{"type", "bool"}, {"value", x}};
        } else if constexpr (std::is_same_v<T, int64_t>) {
          return {{"type", "int64"}, {"value", x}};
        } else if constexpr (std::is_same_v<T, double>) {
          return {{"type", "float64"}, {"value", double_json(x)}};
        } else if constexpr (std::is_same_v<T, std::string>) {
          return {{"type", "string"}, {"value", x}};
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          return {{"type", "int64[]"}, {"value", x}};
        } else {
          ordered_json a = ordered_json::array();
          for (double d : x) a.push_back(double_json(d));
          return {{"type", "float64[]"}, {"value", std::move(a)}};
        }
      },
      value);
}

int64_t tensor_bytes(const TensorInfo& t) {
  int64_t bytes = 0;
  for (const ChunkInfo& c : t.chunks) bytes += c.byte_size;
  return bytes;
}

// The checksummed blocks of a tensor: one per block_bytes of each chunk.
int64_t tensor_blocks(const TensorInfo& t) {
  int64_t blocks = 0;
  for (const ChunkInfo& c : t.chunks) blocks += static_cast<int64_t>(c.checksums.size());
  return blocks;
}

// "[begin, end)"
std::string range_text(int64_t begin, int64_t end) {
  std::ostringstream os;
  os << "[" << begin << ", " << end << ")";
  return os.str();
}

std::string plural(int64_t n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// Rows of cells, printed left-aligned in columns two spaces apart, each
// line indented by two spaces.
void print_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], row[i].size());
    }
  for (const auto& row : rows) {
    std::string line = " ";
    for (size_t i = 0; i < row.size(); ++i) {
      line += " " + row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 1, ' ');
    }
    std::cout << line << "\n";
  }
}

void print_report(const CheckpointInspectArgs& args, const Metadata& md) {
  int64_t chunks = 0, data_bytes = 0, file_bytes = 0;
  for (const auto& [name, t] : md.tensors) {
    chunks += static_cast<int64_t>(t.chunks.size());
    data_bytes += tensor_bytes(t);
  }
  for (const auto& [file, bytes] : md.files) file_bytes += bytes;

  std::cout << "checkpoint " << text_of(args.dir) << ": format version " << md.version
            << ", saved by " << plural(md.world_size, "rank", "ranks") << ", checksum blocks of "
            << md.block_bytes << " bytes\n";

  std::cout << plural(static_cast<int64_t>(md.tensors.size()), "tensor", "tensors")
            << (md.tensors.empty() ? "\n" : ":\n");
  if (!md.tensors.empty()) {
    std::vector<std::vector<std::string>> rows = {
        {"name", "dtype", "shape", "chunks", "bytes", "saved from"}};
    for (const auto& [name, t] : md.tensors)
      rows.push_back({text_of(name), dtype_name(t.dtype), to_string(t.shape),
                      std::to_string(t.chunks.size()), std::to_string(tensor_bytes(t)),
                      t.saved_layout.empty() ? "plain tensor" : text_of(t.saved_layout)});
    print_table(rows);
  }

  if (args.chunks && chunks > 0) {
    std::cout << plural(chunks, "chunk", "chunks") << ":\n";
    std::vector<std::vector<std::string>> rows = {
        {"tensor", "chunk", "offsets", "sizes", "file", "bytes", "blocks"}};
    for (const auto& [name, t] : md.tensors)
      for (size_t i = 0; i < t.chunks.size(); ++i) {
        const ChunkInfo& c = t.chunks[i];
        rows.push_back({text_of(name), std::to_string(i), to_string(c.offsets),
                        to_string(c.sizes), text_of(c.file),
                        range_text(c.byte_offset, c.byte_offset + c.byte_size),
                        std::to_string(c.checksums.size())});
      }
    print_table(rows);
  }

  std::cout << plural(static_cast<int64_t>(md.files.size()), "data file", "data files")
            << (md.files.empty() ? "\n" : ":\n");
  if (!md.files.empty()) {
    std::vector<std::vector<std::string>> rows;
    for (const auto& [file, bytes] : md.files)
      rows.push_back({text_of(file), plural(bytes, "byte", "bytes")});
    print_table(rows);
  }

  std::cout << plural(static_cast<int64_t>(md.values.size()), "value", "values")
            << (md.values.empty() ? "\n" : ":\n");
  if (!md.values.empty()) {
    std::vector<std::vector<std::string>> rows;
    for (const auto& [name, v] : md.values) rows.push_back({text_of(name), value_text(v)});
    print_table(rows);
  }

  std::cout << "total: " << plural(data_bytes, "byte", "bytes") << " of tensor data in "
            << plural(chunks, "chunk", "chunks") << ", "
            << plural(file_bytes, "byte", "bytes") << " in data files\n";
}

ordered_json report_json(const CheckpointInspectArgs& args, const Metadata& md) {
  ordered_json out;
  out["dir"] = args.dir;
  out["version"] = md.version;
  out["world_size"] = md.world_size;
  out["block_bytes"] = md.block_bytes;
  int64_t chunks = 0, data_bytes = 0, file_bytes = 0, blocks = 0;
  ordered_json tensors = ordered_json::object();
  for (const auto& [name, t] : md.tensors) {
    ordered_json tj;
    tj["dtype"] = dtype_short_name(t.dtype);
    tj["shape"] = dims_json(t.shape);
    tj["num_chunks"] = t.chunks.size();
    tj["bytes"] = tensor_bytes(t);
    tj["saved_layout"] = t.saved_layout;
    if (args.chunks) {
      ordered_json cs = ordered_json::array();
      for (const ChunkInfo& c : t.chunks)
        cs.push_back({{"offsets", dims_json(c.offsets)},
                      {"sizes", dims_json(c.sizes)},
                      {"file", c.file},
                      {"byte_offset", c.byte_offset},
                      {"byte_size", c.byte_size},
                      {"blocks", c.checksums.size()}});
      tj["chunks"] = std::move(cs);
    }
    chunks += static_cast<int64_t>(t.chunks.size());
    data_bytes += tensor_bytes(t);
    blocks += tensor_blocks(t);
    tensors[name] = std::move(tj);
  }
  out["tensors"] = std::move(tensors);
  ordered_json files = ordered_json::object();
  for (const auto& [file, bytes] : md.files) {
    files[file] = bytes;
    file_bytes += bytes;
  }
  out["files"] = std::move(files);
  ordered_json values = ordered_json::object();
  for (const auto& [name, v] : md.values) values[name] = value_json(v);
  out["values"] = std::move(values);
  out["total_chunks"] = chunks;
  out["total_bytes"] = data_bytes;
  out["file_bytes"] = file_bytes;
  out["blocks"] = blocks;
  return out;
}

}  // namespace

int run_checkpoint_inspect(const CheckpointInspectArgs& args) {
  const std::string program = "dtensor checkpoint inspect: ";
  Metadata md;
  try {
    md = checkpoint::read_metadata(args.dir);
  } catch (const Error& e) {
    std::cerr << program << one_line(e.what()) << "\n";
    return 1;
  }
  int64_t blocks = 0;
  for (const auto& [name, t] : md.tensors) blocks += tensor_blocks(t);

  if (!args.json) {
    print_report(args, md);
    flush_stdout();  // the report before the slow verification
  }
  std::string error;
  if (!args.no_verify) {
    try {
      checkpoint::verify(args.dir);
    } catch (const Error& e) {
      error = one_line(e.what());
    }
  }
  const bool verified = !args.no_verify && error.empty();
  if (args.json) {
    ordered_json out = report_json(args, md);
    out["verified"] = verified;
    if (!error.empty()) out["error"] = error;
    std::cout << out.dump(2, ' ', false, ordered_json::error_handler_t::replace) << "\n";
  } else if (args.no_verify) {
    std::cout << "checksums: not verified (--no-verify)\n";
  } else if (verified) {
    std::cout << "checksums: " << plural(blocks, "block", "blocks") << " verified\n";
  } else {
    std::cout << "checksums: verification FAILED\n";
  }
  flush_stdout();
  if (!error.empty()) {
    std::cerr << program << error << "\n";
    return 1;
  }
  return 0;
}

}  // namespace dtensor::cli
