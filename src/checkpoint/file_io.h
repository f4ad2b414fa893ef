// Files and directories for checkpoints: whole-range pread/pwrite, fsync,
// and publishing a finished directory atomically. Every failure is a
// dtensor::Error naming the path and the system's reason.
#pragma once

#include <cstdint>
#include <string>

namespace dtensor::checkpoint::detail {

class File {
 public:
  // Every open refuses, naming the path, what is not a regular file (a
  // FIFO, a directory, a device), and never blocks on one.
  // Opens for reading; throws naming the path when it is missing.
  static File open_read(const std::string& path);
  // Creates (truncating) for writing.
  static File create(const std::string& path);
  // Opens an existing file for writing, keeping its contents (several
  // processes write their parts of one file).
  static File open_write(const std::string& path);
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  const std::string& path() const { return path_; }
  int64_t size() const;
  // Reads exactly n bytes at offset; a short file throws naming `what`.
  void read_at(void* data, int64_t n, int64_t offset, const std::string& what) const;
  void write_at(const void* data, int64_t n, int64_t offset);
  // Sets the size (holes read as zeros).
  void resize(int64_t size);
  // fsync: the bytes are on the disk when it returns.
  void sync();

 private:
  File(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

// The whole of the regular file at `path` (File::open_read's checks).
std::string read_whole(const std::string& path, const char* what);
// "dir/name".
std::string join(const std::string& dir, const std::string& name);
bool exists(const std::string& path);
// Makes `dir` (and its parents); an existing directory is fine.
void make_dirs(const std::string& dir);
// Removes a file or a directory tree; a missing path is fine.
void remove_all(const std::string& path);
// fsyncs a directory, so the names made in it survive a crash.
void sync_dir(const std::string& dir);
// Makes `from` (a finished directory) visible as `to` in one atomic step:
// a rename, or, when `to` exists, an exchange of the two names. At every
// instant `to` is the old or the new directory, whole. Returns whether it
// replaced one: the old directory then sits at `from`, for the caller to
// remove.
bool publish_dir(const std::string& from, const std::string& to);

}  // namespace dtensor::checkpoint::detail
