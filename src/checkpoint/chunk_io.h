// Reading part of a saved chunk: the blocks that hold the part are read
// (straight into the target when a block lies inside one run of it, else
// through one block of scratch), each is checked against its checksum,
// and the part's bytes land in the target box. Memory beyond the target:
// one block.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/box.h"
#include "checkpoint/file_io.h"

namespace dtensor::checkpoint::detail {

// Where a chunk's bytes are and how to check them.
struct ChunkSource {
  const File* file = nullptr;
  int64_t byte_offset = 0;  // of the chunk in the file
  int64_t byte_size = 0;
  int64_t block_bytes = 0;
  const std::vector<uint64_t>* checksums = nullptr;  // null or empty: not checked
  std::string what;                                  // "tensor 'w', chunk at [0, 4]"
};

// Copies the part `inner` of the chunk stored as box `chunk` into the
// contiguous row-major box `dst` at dst_data. REQUIRES: inner inside both.
void read_part(const ChunkSource& src, const Box& chunk, const Box& inner, const Box& dst,
               char* dst_data, size_t itemsize, std::vector<char>& scratch);

// Reads the whole chunk a block at a time and checks every block.
void verify_chunk(const ChunkSource& src, std::vector<char>& scratch);

}  // namespace dtensor::checkpoint::detail
