// metadata.json: the Metadata of checkpoint.h as JSON, and its validation
// on the way in (a checkpoint is input: every size, offset and byte range
// in it is checked before it is used).
#pragma once

#include <string>

#include "dtensor/checkpoint.h"

namespace dtensor::checkpoint::detail {

inline constexpr const char* kMetadataFile = "metadata.json";
inline constexpr const char* kFormatName = "dtensor-checkpoint";

// As JSON, with the checksum of its content (format version 2).
std::string to_json(const Metadata& md);
// Parses and validates (first the format, version and the checksum of the
// content, then every field); `path` names the file in errors.
Metadata parse_metadata(const std::string& text, const std::string& path);
// `text` (a metadata.json, edited) with the checksum of its content
// recomputed: for tests that edit a checkpoint's metadata on purpose, to
// reach the checks behind the checksum.
std::string reseal_metadata(const std::string& text);
// "data-<rank>.bin"
std::string data_file_name(int rank);
// metadata.json or data-<rank>.bin: the names save() writes in a checkpoint
// directory (and so the only ones it ever removes).
bool is_checkpoint_file_name(const std::string& name);
// Whether `text` is JSON whose "format" is a dtensor checkpoint's (any
// version, valid or not otherwise): the test save() applies before it
// replaces a directory.
bool has_checkpoint_format(const std::string& text);

}  // namespace dtensor::checkpoint::detail
