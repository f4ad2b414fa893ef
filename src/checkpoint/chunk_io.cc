#include "checkpoint/chunk_io.h"

#include <algorithm>
#include <cstring>
#include <ios>
#include <sstream>

#include "checkpoint/checksum.h"
#include "dtensor/error.h"

namespace dtensor::checkpoint::detail {

namespace {

std::string hex(uint64_t v) {
  std::ostringstream os;
  os << std::hex << v;
  return os.str();
}

void check_block(const ChunkSource& src, int64_t block, const char* data, int64_t n) {
  if (src.checksums == nullptr || src.checksums->empty()) return;
  const uint64_t want = (*src.checksums)[static_cast<size_t>(block)];
  const uint64_t got = checksum(data, n);
  DT_CHECK(got == want, "checkpoint: ", src.file->path(), " is corrupted: ", src.what,
           ", bytes ", src.byte_offset + block * src.block_bytes, "..",
           src.byte_offset + block * src.block_bytes + n, " have checksum ", hex(got),
           " but metadata.json records ", hex(want));
}

}  // namespace

void read_part(const ChunkSource& src, const Box& chunk, const Box& inner, const Box& dst,
               char* dst_data, size_t itemsize, std::vector<char>& scratch) {
  RunIter it(inner, chunk, dst, itemsize);
  const int64_t bb = src.block_bytes;
  // The run being copied, advanced as its bytes are placed.
  Run cur = it.run();
  const auto advance = [&](int64_t k) {
    cur.src += k;
    cur.dst += k;
    cur.bytes -= k;
    if (cur.bytes == 0) {
      it.next();
      if (!it.done()) cur = it.run();
    }
  };
  int64_t block = cur.src / bb;
  while (!it.done()) {
    block = std::max(block, cur.src / bb);
    const int64_t lo = block * bb;
    const int64_t n = std::min(bb, src.byte_size - lo);
    const int64_t hi = lo + n;
    const std::string what = src.what;
    if (cur.src <= lo && cur.src + cur.bytes >= hi) {
      // The whole block belongs to this run: read it in place.
      char* at = dst_data + cur.dst + (lo - cur.src);
      src.file->read_at(at, n, src.byte_offset + lo, what);
      check_block(src, block, at, n);
      advance(hi - cur.src);
    } else {
      // At most one block, and no more than the chunk holds (a checkpoint's
      // block_bytes may be far larger than its data).
      const auto need = static_cast<size_t>(std::min(bb, src.byte_size));
      if (scratch.size() < need) scratch.resize(need);
      src.file->read_at(scratch.data(), n, src.byte_offset + lo, what);
      check_block(src, block, scratch.data(), n);
      while (!it.done() && cur.src < hi) {
        const int64_t k = std::min(cur.src + cur.bytes, hi) - cur.src;
        std::memcpy(dst_data + cur.dst, scratch.data() + (cur.src - lo), static_cast<size_t>(k));
        advance(k);
      }
    }
    ++block;
  }
}

void verify_chunk(const ChunkSource& src, std::vector<char>& scratch) {
  const auto need = static_cast<size_t>(std::min(src.block_bytes, src.byte_size));
  if (scratch.size() < need) scratch.resize(need);
  for (int64_t lo = 0, block = 0; lo < src.byte_size; lo += src.block_bytes, ++block) {
    const int64_t n = std::min(src.block_bytes, src.byte_size - lo);
    src.file->read_at(scratch.data(), n, src.byte_offset + lo, src.what);
    check_block(src, block, scratch.data(), n);
  }
}

}  // namespace dtensor::checkpoint::detail
