// Checked output (see output.h).
#include "output.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "cli.h"
#include "dtensor/error.h"

namespace dtensor::cli {

namespace {

namespace fs = std::filesystem;

std::string reason(int err) { return err != 0 ? std::strerror(err) : "unknown error"; }

// The directory a file path lands in ("." for a bare name).
fs::path parent_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

bool writable_dir(const fs::path& dir) { return ::access(dir.c_str(), W_OK | X_OK) == 0; }

// std::cout's buffer, written with write(2), keeping the first error's
// errno: through stdio, a write that fails when its buffer fills leaves only
// ferror() set, and the reason is gone by the time the program checks.
class CheckedStdoutBuf : public std::streambuf {
 public:
  CheckedStdoutBuf() { setp(buffer_, buffer_ + sizeof buffer_); }
  int error() const { return error_; }
  void clear_error() { error_ = 0; }

 protected:
  int_type overflow(int_type c) override {
    if (!drain()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override { return drain() ? 0 : -1; }

 private:
  // Writes out the buffer; false (and the error kept) when a write fails.
  // The buffer is emptied either way, so that a failure is not repeated.
  bool drain() {
    const char* p = pbase();
    const char* end = pptr();
    setp(buffer_, buffer_ + sizeof buffer_);
    while (p < end) {
      const ssize_t n = ::write(STDOUT_FILENO, p, static_cast<size_t>(end - p));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (error_ == 0) error_ = n < 0 ? errno : EIO;
        return false;
      }
      p += n;
    }
    return error_ == 0;
  }
  char buffer_[1 << 14];
  int error_ = 0;
};

CheckedStdoutBuf* checked_stdout = nullptr;

}  // namespace

void install_checked_stdout() {
  // Never freed: std::cout is flushed at exit, after static objects go.
  checked_stdout = new CheckedStdoutBuf;
  std::cout.rdbuf(checked_stdout);
}

void flush_stdout() {
  DT_CHECK(checked_stdout != nullptr,
           "internal error: flush_stdout before install_checked_stdout (main calls it first)");
  std::cout.flush();
  const int err = checked_stdout->error();
  if (err == 0 && std::cout) return;
  // Reported once: later flushes start clean.
  std::cout.clear();
  checked_stdout->clear_error();
  DT_THROW("cannot write to standard output: ", reason(err));
}

void write_file(const std::string& path, const std::string& content, const std::string& option) {
  errno = 0;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) DT_THROW(option, " ", quote(path), ": cannot write the file: ", reason(errno));
  errno = 0;
  const size_t written = std::fwrite(content.data(), 1, content.size(), f);
  // A buffered write fails at the flush or the close, not at fwrite: all
  // three are checked.
  bool ok = written == content.size();
  int err = ok ? 0 : errno;
  if (std::fflush(f) != 0 && ok) ok = false, err = errno;
  if (std::fclose(f) != 0 && ok) ok = false, err = errno;
  if (!ok) DT_THROW(option, " ", quote(path), ": writing the file failed: ", reason(err));
}

void check_output_file(const std::string& path, const std::string& option) {
  DT_CHECK(!path.empty(), option, ": expected a file path, got ''");
  std::error_code ec;
  DT_CHECK(!fs::is_directory(path, ec), option, " ", quote(path),
           " is a directory; expected a file path");
  const fs::path dir = parent_of(path);
  DT_CHECK(fs::is_directory(dir, ec), option, " ", quote(path), ": the directory ",
           quote(dir.string()), " does not exist");
  if (fs::exists(path, ec))
    DT_CHECK(::access(path.c_str(), W_OK) == 0, option, " ", quote(path),
             " cannot be written: ", reason(errno));
  else
    DT_CHECK(writable_dir(dir), option, " ", quote(path), ": the directory ", quote(dir.string()),
             " is not writable: ", reason(errno));
}

void check_output_dir(const std::string& path, const std::string& option) {
  DT_CHECK(!path.empty(), option, ": expected a directory path, got ''");
  std::error_code ec;
  // The path itself, else its nearest existing ancestor, which the
  // directories would be created in.
  fs::path p = fs::path(path);
  if (fs::exists(p, ec)) {
    DT_CHECK(fs::is_directory(p, ec), option, " ", quote(path),
             " exists and is not a directory; expected a directory (or a path to create one)");
    DT_CHECK(writable_dir(p), option, " ", quote(path), ": the directory is not writable: ",
             reason(errno));
    return;
  }
  fs::path ancestor = p.parent_path();
  while (!ancestor.empty() && !fs::exists(ancestor, ec)) ancestor = ancestor.parent_path();
  if (ancestor.empty()) ancestor = p.is_absolute() ? fs::path("/") : fs::path(".");
  DT_CHECK(fs::is_directory(ancestor, ec), option, " ", quote(path), ": ",
           quote(ancestor.string()), " is not a directory, so the directory cannot be created");
  DT_CHECK(writable_dir(ancestor), option, " ", quote(path), ": cannot create it in ",
           quote(ancestor.string()), ": ", reason(errno));
}

ProgressLine::ProgressLine() : tty_(::isatty(STDERR_FILENO) == 1) {}

ProgressLine::~ProgressLine() { clear(); }

void ProgressLine::show(const std::string& text) {
  if (!tty_) return;
  std::cerr << "\r\033[K" << text << std::flush;
  shown_ = true;
}

void ProgressLine::clear() {
  if (!tty_ || !shown_) return;
  std::cerr << "\r\033[K" << std::flush;
  shown_ = false;
}

}  // namespace dtensor::cli
