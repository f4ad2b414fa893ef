// metadata.json: the Metadata of checkpoint.h as JSON, and its validation
// on the way in (a checkpoint is input: every size, offset and byte range
// in it is checked before it is used).
#pragma once

#include <string>

#include "dtensor/checkpoint.h"

namespace dtensor::checkpoint::detail {

inline constexpr const char* kMetadataFile = "metadata.json";
inline constexpr const char* kFormatName = "dtensor-checkpoint";

std::string to_json(const Metadata& md);
// Parses and validates; `path` names the file in errors.
Metadata parse_metadata(const std::string& text, const std::string& path);
// "data-<rank>.bin"
std::string data_file_name(int rank);

}  // namespace dtensor::checkpoint::detail
