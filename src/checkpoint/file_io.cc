#include "checkpoint/file_io.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2 (glibc 2.28+)
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "dtensor/error.h"

namespace dtensor::checkpoint::detail {

namespace {

std::string reason() { return std::strerror(errno); }

std::string parent_of(const std::string& path) {
  const std::string p = std::filesystem::path(path).parent_path().string();
  return p.empty() ? "." : p;
}

const char* file_kind(unsigned mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a symbolic link";
  return S_ISREG(mode) ? "a regular file" : "not a regular file";
}

// Opens `path` with `flags` | O_NONBLOCK (opening a FIFO would otherwise
// wait for its other end forever), then checks by fstat that it is a
// regular file, and only then makes its reads and writes blocking again.
int open_regular(const std::string& path, int flags, const char* what) {
  const int fd = ::open(path.c_str(), flags | O_NONBLOCK | O_CLOEXEC, 0644);
  struct stat st;
  if (fd < 0) {
    // (A FIFO without a reader fails a non-blocking open for writing.)
    const std::string why = reason();
    DT_CHECK(::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode), "checkpoint: ", path, " is ",
             file_kind(st.st_mode),
             ", not a regular file (a checkpoint reads and writes regular files only)");
    DT_THROW("checkpoint: cannot ", what, " ", path, ": ", why);
  }
  std::string problem;  // after "checkpoint: "
  if (::fstat(fd, &st) != 0) {
    problem = "cannot stat " + path + ": " + reason();
  } else if (!S_ISREG(st.st_mode)) {
    problem = path + " is " + file_kind(st.st_mode) +
              ", not a regular file (a checkpoint reads and writes regular files only)";
  } else if (const int fl = ::fcntl(fd, F_GETFL);
             fl < 0 || ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    problem = "cannot make " + path + " blocking: " + reason();
  }
  if (!problem.empty()) {
    ::close(fd);
    DT_THROW("checkpoint: ", problem);
  }
  return fd;
}

}  // namespace

File File::open_read(const std::string& path) {
  return File(open_regular(path, O_RDONLY, "open"), path);
}

File File::create(const std::string& path) {
  return File(open_regular(path, O_WRONLY | O_CREAT | O_TRUNC, "create"), path);
}

File File::open_write(const std::string& path) {
  return File(open_regular(path, O_WRONLY, "open for writing"), path);
}

File::File(File&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

int64_t File::size() const {
  struct stat st;
  DT_CHECK(::fstat(fd_, &st) == 0, "checkpoint: cannot stat ", path_, ": ", reason());
  return static_cast<int64_t>(st.st_size);
}

void File::read_at(void* data, int64_t n, int64_t offset, const std::string& what) const {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t got = ::pread(fd_, p, static_cast<size_t>(n), offset);
    if (got < 0 && errno == EINTR) continue;
    DT_CHECK(got >= 0, "checkpoint: reading ", path_, " (", what, "): ", reason());
    DT_CHECK(got > 0, "checkpoint: ", path_, " is truncated: ", what, " needs bytes up to ",
             offset + n, " but the file has ", size());
    p += got;
    n -= got;
    offset += got;
  }
}

void File::write_at(const void* data, int64_t n, int64_t offset) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t put = ::pwrite(fd_, p, static_cast<size_t>(n), offset);
    if (put < 0 && errno == EINTR) continue;
    DT_CHECK(put > 0, "checkpoint: writing ", path_, ": ", reason());
    p += put;
    n -= put;
    offset += put;
  }
}

void File::resize(int64_t size) {
  DT_CHECK(::ftruncate(fd_, size) == 0, "checkpoint: cannot size ", path_, " to ", size,
           " bytes: ", reason());
}

void File::sync() {
  DT_CHECK(::fsync(fd_) == 0, "checkpoint: fsync of ", path_, " failed: ", reason());
}

std::string read_whole(const std::string& path, const char* what) {
  const File f = File::open_read(path);
  std::string text(static_cast<size_t>(f.size()), '\0');
  f.read_at(text.data(), static_cast<int64_t>(text.size()), 0, what);
  return text;
}

std::string join(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir) / name).string();
}

bool exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

void make_dirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  DT_CHECK(!ec, "checkpoint: cannot make directory ", dir, ": ", ec.message());
}

void remove_all(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  DT_CHECK(!ec, "checkpoint: cannot remove ", path, ": ", ec.message());
}

void sync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DT_CHECK(fd >= 0, "checkpoint: cannot open directory ", dir, ": ", reason());
  const int rc = ::fsync(fd);
  const std::string why = rc == 0 ? "" : reason();
  ::close(fd);
  DT_CHECK(rc == 0, "checkpoint: fsync of directory ", dir, " failed: ", why);
}

bool publish_dir(const std::string& from, const std::string& to) {
  if (!exists(to)) {
    DT_CHECK(::rename(from.c_str(), to.c_str()) == 0, "checkpoint: cannot rename ", from,
             " to ", to, ": ", reason());
    sync_dir(parent_of(to));
    return false;
  }
  // Swap the names in one step, so `to` never stops being a whole
  // checkpoint; the old one then sits at `from`.
  DT_CHECK(::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0,
           "checkpoint: cannot replace ", to, " with ", from, ": ", reason(),
           " (the new checkpoint is complete at ", from, ")");
  sync_dir(parent_of(to));
  return true;
}

}  // namespace dtensor::checkpoint::detail
