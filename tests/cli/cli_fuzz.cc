// Fuzzes the `dtensor` command line: runs the program on thousands of seeded
// random and adversarial argument lists and checks the contract scripts rely
// on, whatever the input:
//   - it exits (no signal: no segfault, abort or uncaught exception), within
//     a time limit (no hang);
//   - the exit status is 0, 1 (a verification mismatch) or 2 (bad input);
//   - a failure (1 or 2) writes exactly one line to stderr, which starts with
//     "dtensor"; status 2 writes nothing to stdout; success writes nothing to
//     stderr.
// The arguments mix valid small layouts (which must run and verify) with
// overflowing and negative numbers, invalid UTF-8, control bytes, huge
// strings, repeated and missing options and random placements and meshes.
//
//   cli_fuzz <dtensor binary> [--runs N] [--seed S] [--jobs J] [--timeout SECONDS]
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Args = std::vector<std::string>;

struct Result {
  bool signaled = false;
  bool timed_out = false;
  int signal = 0;
  int status = -1;
  std::string out, err;
  double ms = 0;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// Runs exe with args, stdout and stderr to files; kills it after timeout_s.
Result run(const std::string& exe, const Args& args, const std::string& tmp_prefix,
           double timeout_s) {
  const std::string out_path = tmp_prefix + ".out", err_path = tmp_prefix + ".err";
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("fork");
    std::exit(3);
  }
  if (pid == 0) {
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int null_in = open("/dev/null", O_RDONLY);
    if (out < 0 || err < 0 || null_in < 0) _exit(127);
    dup2(null_in, 0);
    dup2(out, 1);
    dup2(err, 2);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(exe.c_str()));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(exe.c_str(), argv.data());
    _exit(127);
  }
  Result r;
  int wstatus = 0;
  while (true) {
    const pid_t done = waitpid(pid, &wstatus, WNOHANG);
    if (done == pid) break;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (elapsed > timeout_s) {
      kill(pid, SIGKILL);
      waitpid(pid, &wstatus, 0);
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(elapsed < 0.05 ? 200 : 2000));
  }
  r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (WIFSIGNALED(wstatus)) {
    r.signaled = true;
    r.signal = WTERMSIG(wstatus);
  } else if (WIFEXITED(wstatus)) {
    r.status = WEXITSTATUS(wstatus);
  }
  r.out = read_file(out_path);
  r.err = read_file(err_path);
  return r;
}

// The contract; returns what is broken, or "" when the run keeps it.
std::string check(const Result& r) {
  if (r.timed_out) return "did not finish in time (killed)";
  if (r.signaled) return "killed by signal " + std::to_string(r.signal);
  if (r.status != 0 && r.status != 1 && r.status != 2)
    return "exit status " + std::to_string(r.status) + " (expected 0, 1 or 2)";
  if (r.status == 0) return r.err.empty() ? "" : "exit 0 but stderr is not empty";
  size_t lines = 0;
  for (char c : r.err) lines += c == '\n';
  if (lines != 1 || r.err.back() != '\n')
    return "stderr has " + std::to_string(lines) + " newline(s), expected exactly one line";
  if (r.err.rfind("dtensor", 0) != 0) return "stderr does not start with 'dtensor'";
  if (r.status == 2 && !r.out.empty()) return "exit 2 but stdout is not empty";
  return "";
}

// Printable form of an argument list for the failure report.
std::string show(const Args& args) {
  std::string s;
  for (const std::string& a : args) {
    s += " '";
    if (a.size() > 80) {
      s += a.substr(0, 60) + "...(" + std::to_string(a.size()) + " bytes)";
    } else {
      for (unsigned char c : a) {
        if (c < 0x20 || c >= 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          s += buf;
        } else {
          s += static_cast<char>(c);
        }
      }
    }
    s += "'";
  }
  return s;
}

class Generator {
 public:
  explicit Generator(uint64_t seed) : rng_(seed) {}

  Args next() {
    const int kind = pick(100);
    Args a;
    if (kind < 40) a = plan();
    else if (kind < 70) a = visualize();
    else if (kind < 90) a = demo();
    else a = junk();
    mutate(a);
    return a;
  }

 private:
  int pick(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }
  bool chance(int percent) { return pick(100) < percent; }
  template <class T>
  const T& one(const std::vector<T>& v) { return v[pick(static_cast<int>(v.size()))]; }

  std::string adversarial_number() {
    static const std::vector<std::string> v = {
        "0", "-1", "-9223372036854775808", "9223372036854775807", "9223372036854775806",
        "9223372036854775808", "18446744073709551616", "99999999999999999999", "2147483648",
        "4294967296", "4294967297", "65536", "65537", "46341", "1e3", "0x10", "1.5", "abc", "",
        " ", "+5", "--", "nan", "inf", "-0", "007", "1,2", "\xff", "1\n2"};
    return one(v);
  }
  std::string small_number(int lo, int hi) { return std::to_string(lo + pick(hi - lo + 1)); }
  std::string number(int lo, int hi) {
    return chance(70) ? small_number(lo, hi) : adversarial_number();
  }

  std::string weird_string() {
    switch (pick(7)) {
      case 0: return std::string(1 + pick(100000), 'a');  // Linux takes at most 128 KiB an argument
      case 1: return std::string("\xff\xfe\xc3\x28", 4);
      case 2: return std::string("a\nb\tc\x01\x7f");
      case 3: return "\xe2\x82\xac,\xf0\x9f\x98\x80";  // valid UTF-8: euro sign, emoji
      case 4: {
        std::string s;
        const int n = 1 + pick(64);
        for (int i = 0; i < n; ++i) s += static_cast<char>(1 + pick(255));
        return s;
      }
      case 5: return std::string(5000, ',');
      default: return "";
    }
  }

  std::vector<int> mesh_sizes_;  // of the last valid mesh made

  std::string mesh() {
    mesh_sizes_.clear();
    if (chance(80)) {
      static const std::vector<std::vector<int>> meshes = {
          {1}, {2}, {4}, {8}, {2, 2}, {4, 2}, {2, 4}, {2, 2, 2}, {3}, {3, 2}, {1, 4}, {2, 1, 2}};
      mesh_sizes_ = one(meshes);
      std::string s;
      for (size_t i = 0; i < mesh_sizes_.size(); ++i)
        s.append(i ? "x" : "").append(std::to_string(mesh_sizes_[i]));
      return s;
    }
    static const std::vector<std::string> bad = {
        "46341x46341", "100000x100000", "65536x2", "256x257", "9223372036854775807",
        "9223372036854775807x2", "2x2x2x2x2x2x2x2x2", "0", "-1", "2x", "x2", "2xx2", "4y2", "2x-2",
        "1e3", "", "99999999999999999999", "2x2x2x2x2x2x2x2"};
    return chance(80) ? one(bad) : weird_string();
  }

  std::string shape() {
    if (chance(65)) {
      const int nd = pick(4);
      std::string s;
      for (int i = 0; i < nd; ++i) s.append(i ? "," : "").append(small_number(0, 17));
      if (chance(10)) s = "[" + s + "]";
      return s;
    }
    static const std::vector<std::string> bad = {
        "9223372036854775807", "9223372036854775806,2", "4294967296,4294967296",
        "2305843009213693951", "1152921504606846976", "3037000500,3037000500", "-1", "8,-2",
        "18446744073709551616", "1,2,3,4,5,6,7,8,9", "1,1,1,1,1,1,1,1", "2147483648",
        "100000000000", "1000000,1000000", "8,x", ",", "[", "[]", "0,9223372036854775807",
        "9223372036854775807,9223372036854775807,0", "65536,65536,65536"};
    return chance(85) ? one(bad) : weird_string();
  }

  std::string placement(int ndim) {
    if (chance(85)) {
      switch (pick(6)) {
        case 0:
        case 1: return "S(" + std::to_string(ndim > 0 ? pick(ndim) : 0) + ")";
        case 2: return "R";
        case 3: return "P";
        case 4: return one(std::vector<std::string>{"P(sum)", "P(avg)", "P(max)", "P(min)",
                                                    "Shard(0)", "Replicate()", "Partial()",
                                                    "S(-1)", "s(0)"});
        default: return "S(" + std::to_string(pick(3)) + ")";
      }
    }
    static const std::vector<std::string> bad = {
        "S(256)", "S(8)", "S(-8)", "S(99999999999999999999)", "S(-9223372036854775808)",
        "S(9223372036854775807)", "S()", "S(", "S(0", "P(foo)", "X", "", "S(0x1)", "S(1.0)",
        "Shard(256)", "S(+1)", "S( 1 )"};
    return chance(90) ? one(bad) : weird_string();
  }

  std::string placements(int ndim_tensor) {
    int n = static_cast<int>(mesh_sizes_.empty() ? 1 + pick(3) : mesh_sizes_.size());
    if (chance(10)) n += chance(50) ? 1 : -1;
    if (chance(2)) n = 9;
    std::string s;
    for (int i = 0; i < n; ++i) s.append(i ? "," : "").append(placement(ndim_tensor));
    return s;
  }

  static int ndim_of(const std::string& shape) {
    if (shape.empty() || shape == "[]") return 0;
    int n = 1;
    for (char c : shape) n += c == ',';
    return n;
  }

  Args plan() {
    Args a = {"plan"};
    const std::string m = mesh(), s = shape();
    const int nd = ndim_of(s);
    add(a, "--mesh", m, 97);
    add(a, "--shape", s, 97);
    add(a, "--from", placements(nd), 97);
    add(a, "--to", placements(nd), 97);
    if (chance(20)) add(a, "--dtype", one(std::vector<std::string>{"f32", "f64", "i64", "bool", "f16", ""}));
    if (chance(15)) add(a, "--names", names());
    if (chance(15)) {
      static const std::vector<std::string> groups = {
          "0,1", "1,2", "0,2", "d0,d1", "A,B", "2147483648", "-1", "99999999999999999999", "",
          "0,,1", "0,0", "9223372036854775807", "0,1,2,3,4,5,6,7,8"};
      add(a, "--flatten", chance(90) ? one(groups) : weird_string());
    }
    if (chance(10)) add(a, "--devices-per-host", number(1, 16));
    if (chance(40)) a.push_back("--verify");
    if (chance(25)) a.push_back("--json");
    if (chance(15)) a.push_back("--no-auto-flatten");
    return a;
  }

  std::string names() {
    const size_t n = mesh_sizes_.empty() ? 1 + pick(3) : mesh_sizes_.size();
    if (chance(60)) {
      static const std::vector<std::string> pool = {"dp", "tp", "pp", "A", "B", "C", "ep"};
      std::string s;
      for (size_t i = 0; i < n; ++i) s += (i ? "," : "") + pool[i % pool.size()];
      return s;
    }
    return chance(50) ? weird_string() : std::string("dp,\xff\xfe");
  }

  Args visualize() {
    Args a = {"visualize"};
    const std::string m = mesh(), s = shape();
    add(a, "--mesh", m, 97);
    add(a, "--shape", s, 97);
    add(a, "--placements", placements(ndim_of(s)), 97);
    if (chance(20)) add(a, "--names", names());
    if (chance(15)) add(a, "--dtype", one(std::vector<std::string>{"f32", "f64", "i64", "bool", "x"}));
    if (chance(30)) a.push_back("--json");
    return a;
  }

  Args demo() {
    Args a = {"demo"};
    // Valid runs stay small: the demo computes a whole transformer.
    if (chance(70)) {
      add(a, "--mesh", one(std::vector<std::string>{"1", "2", "4", "2x2", "1x2", "2x1"}));
    } else {
      add(a, "--mesh", mesh());
    }
    add(a, "--layers", number(0, 1), 90);
    add(a, "--steps", number(1, 2), 90);
    add(a, "--batch", number(1, 4), 90);
    add(a, "--seq", number(1, 8), 90);
    const int heads = 1 << pick(3);
    add(a, "--heads", chance(80) ? std::to_string(heads) : adversarial_number(), 90);
    add(a, "--hidden", chance(80) ? std::to_string(heads * (1 + pick(4))) : adversarial_number(), 90);
    add(a, "--vocab", number(1, 32), 90);
    if (chance(15)) add(a, "--names", names());
    if (chance(10)) add(a, "--tolerance", one(std::vector<std::string>{"1e-3", "0", "-1", "nan", "inf", "1e999", "x"}));
    if (chance(10)) add(a, "--world", one(std::vector<std::string>{"sim", "auto", "cluster", ""}));
    if (chance(10)) a.push_back("--no-sequence-parallel");
    if (chance(10)) a.push_back("--no-loss-parallel");
    if (chance(30)) a.push_back("--json");
    return a;
  }

  Args junk() {
    Args a;
    const int n = pick(4);
    for (int i = 0; i < n; ++i) {
      a.push_back(chance(50) ? one(std::vector<std::string>{"demo", "plan", "visualize", "--help",
                                                           "--json", "-x", "--", "shard", "--mesh"})
                             : weird_string());
    }
    return a;
  }

  // Adds "--opt value" with the given probability (percent).
  void add(Args& a, const std::string& opt, const std::string& value, int percent = 100) {
    if (!chance(percent)) return;
    a.push_back(opt);
    a.push_back(value);
  }

  // Sometimes repeats an option, drops a value, or appends junk.
  void mutate(Args& a) {
    if (a.size() > 2 && chance(5)) {
      const size_t i = 1 + pick(static_cast<int>(a.size() - 1));
      if (a[i].rfind("--", 0) == 0 && i + 1 < a.size()) {
        a.push_back(a[i]);
        a.push_back(a[i + 1]);
      }
    }
    if (a.size() > 1 && chance(3)) a.pop_back();
    if (chance(3)) a.push_back(chance(50) ? weird_string() : "--bogus");
    if (chance(2)) a.push_back("--help");
  }

  std::mt19937_64 rng_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: cli_fuzz <dtensor binary> [--runs N] [--seed S] [--jobs J] [--timeout S]\n";
    return 3;
  }
  const std::string exe = argv[1];
  int runs = 2000, jobs = 2;
  uint64_t seed = 1;
  double timeout_s = 30;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--runs") runs = std::atoi(argv[i + 1]);
    else if (k == "--seed") seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (k == "--jobs") jobs = std::max(1, std::atoi(argv[i + 1]));
    else if (k == "--timeout") timeout_s = std::atof(argv[i + 1]);
  }

  // The defects this test was written for come first, then the random ones.
  std::vector<Args> cases = {
      {"plan", "--mesh", "8", "--shape", "9223372036854775807", "--from", "R", "--to", "S(0)", "--verify"},
      {"plan", "--mesh", "8", "--shape", "9223372036854775806,2", "--from", "S(0)", "--to", "S(0)", "--verify"},
      {"plan", "--mesh", "8", "--shape", "4294967296,4294967296", "--from", "S(0)", "--to", "R", "--verify"},
      {"plan", "--mesh", "4", "--shape", "65536,65536,16", "--from", "S(0)", "--to", "R", "--verify"},
      {"demo", "--mesh", "46341x46341"},
      {"demo", "--mesh", "100000x100000"},
      {"demo", "--hidden", "65536", "--heads", "8"},
      {"plan", "--mesh", "2x2", "--shape", "8", "--from", "R,R", "--to", "R,R", "--flatten", "2147483648"},
      {"demo", "--names", "\xff\xfe,b", "--json"},
      {"demo", "--batch", "abc"},
      {"plan", "--mesh", "4", "--shape", "8", "--from", "R", "--from", "R", "--to", "R"},
      {std::string(100000, 'a')},
      {"visualize", "--mesh", "4", "--shape", "8", "--placements", "S(256)"},
      {"visualize", "--mesh", "4", "--shape", "8", "--placements", "S(99999999999999999999)"},
  };
  Generator gen(seed);
  while (static_cast<int>(cases.size()) < runs) cases.push_back(gen.next());

  std::vector<int> status_count(3, 0);
  std::vector<std::string> failures;
  double slowest = 0;
  size_t slowest_at = 0;
  std::mutex mu;
  std::atomic<size_t> next{0};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (int j = 0; j < jobs; ++j) {
    workers.emplace_back([&, j] {
      const std::string tmp = "/tmp/dtensor_cli_fuzz." + std::to_string(getpid()) + "." + std::to_string(j);
      for (size_t i = next++; i < cases.size(); i = next++) {
        const Result r = run(exe, cases[i], tmp, timeout_s);
        const std::string broken = check(r);
        std::lock_guard<std::mutex> lock(mu);
        if (r.ms > slowest) {
          slowest = r.ms;
          slowest_at = i;
        }
        if (!r.signaled && !r.timed_out && r.status >= 0 && r.status <= 2) ++status_count[r.status];
        if (!broken.empty()) {
          std::string err = r.err.substr(0, 400);
          failures.push_back("case " + std::to_string(i) + ":" + show(cases[i]) + "\n  " + broken +
                             "\n  stderr: " + err);
        }
      }
      unlink((tmp + ".out").c_str());
      unlink((tmp + ".err").c_str());
    });
  }
  for (std::thread& w : workers) w.join();
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  for (const std::string& f : failures) std::cout << "FAIL " << f << "\n";
  std::cout << "cli_fuzz: " << cases.size() << " runs (seed " << seed << ") in " << total_s
            << " s: exit 0: " << status_count[0] << ", exit 1: " << status_count[1]
            << ", exit 2: " << status_count[2] << "; slowest " << slowest << " ms (case "
            << slowest_at << ":" << show(cases[slowest_at]) << ")\n";
  std::cout << (cases.size() - failures.size()) << " passed, " << failures.size() << " failed\n";
  return failures.empty() ? 0 : 1;
}
