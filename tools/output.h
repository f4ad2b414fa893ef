// Where the `dtensor` program's output goes, checked: a file is written
// and closed with every error caught (a full disk, a path that is not
// writable), standard output is flushed line by line and its errors are
// failures too, and output paths are checked before any work starts, so
// that a long run does not fail at its end on a path it could have
// refused at once. Every failure is a dtensor::Error naming the option and
// the path.
#pragma once

#include <string>

namespace dtensor::cli {

// Writes `content` to `path` (replacing it) and closes it; throws
// dtensor::Error naming `option`, the path and the system's reason when
// any write, the flush or the close fails.
void write_file(const std::string& path, const std::string& content, const std::string& option);

// Makes std::cout write through a buffer that keeps the first write
// error's reason; main calls it first. flush_stdout reports that error.
void install_checked_stdout();

// Flushes standard output; throws dtensor::Error with the system's reason
// when it cannot be written (a full disk, a closed pipe). Called after
// every line a long command prints, and by main before it exits.
// REQUIRES: install_checked_stdout() was called.
void flush_stdout();

// Before any work: `path` can be written as a file by write_file: its
// directory exists and is writable, and the path is not a directory.
void check_output_file(const std::string& path, const std::string& option);

// Before any work: `path` is a writable directory, or can be created (its
// nearest existing ancestor is a writable directory). A path naming an
// existing file that is not a directory is refused.
void check_output_dir(const std::string& path, const std::string& option);

// A one-line progress report on a terminal: "\r"-rewritten on stderr when
// stderr is a terminal, nothing otherwise (scripts and logs see only the
// output proper). clear() wipes it before other output is printed.
class ProgressLine {
 public:
  ProgressLine();
  ~ProgressLine();
  void show(const std::string& text);
  void clear();

 private:
  bool tty_;
  bool shown_ = false;
};

}  // namespace dtensor::cli
