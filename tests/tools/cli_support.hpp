// cli_support.hpp - running the built `tsattn` CLI as a subprocess, the way scripts and image
// builds do: exit code, stdout and stderr, in a hermetic environment (every TSATTN_* variable of
// the test process removed, the cache pointed into a temp directory).
#pragma once

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string_view>
#include <string>
#include <vector>

#include "jit/cache/cache_test_support.hpp"

extern "C" char** environ;

namespace tsattn::test {

struct CliResult {
  int code = -1;  // exit status, or -signal
  std::string out, err;
};

// A CLI process started in the background (for concurrency tests); wait() collects it.
class CliProcess {
 public:
  CliProcess(pid_t pid, std::string out_path, std::string err_path)
      : pid_(pid), out_path_(std::move(out_path)), err_path_(std::move(err_path)) {}
  CliResult wait() {
    int status = 0;
    REQUIRE(::waitpid(pid_, &status, 0) == pid_);
    CliResult r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    const std::vector<uint8_t> out = read_bytes(out_path_), err = read_bytes(err_path_);
    r.out.assign(out.begin(), out.end());
    r.err.assign(err.begin(), err.end());
    return r;
  }

 private:
  pid_t pid_;
  std::string out_path_, err_path_;
};

// A temp directory for one test's caches and manifests, and the environment the CLI runs in.
class CliSandbox {
 public:
  TempDir tmp;
  std::string user_cache = tmp / "user";
  std::map<std::string, std::string> env{{"TSATTN_CACHE_DIR", user_cache}};

  CliProcess start(const std::vector<std::string>& args) {
    const std::string out = tmp / ("cli" + std::to_string(runs_) + ".out");
    const std::string err = tmp / ("cli" + std::to_string(runs_++) + ".err");
    // Everything the child needs is built here: after fork() in a process that may have threads,
    // the child only calls async-signal-safe functions (open, dup2, execve, _exit).
    std::vector<std::string> argv_text{TSATTN_CLI_PATH};
    argv_text.insert(argv_text.end(), args.begin(), args.end());
    std::vector<std::string> env_text;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e)
      if (!std::string_view(*e).starts_with("TSATTN_")) env_text.emplace_back(*e);
    for (const auto& [name, value] : env) env_text.push_back(name + "=" + value);
    std::vector<char*> argv, envp;
    for (std::string& a : argv_text) argv.push_back(a.data());
    for (std::string& e : env_text) envp.push_back(e.data());
    argv.push_back(nullptr);
    envp.push_back(nullptr);

    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const int in_fd = ::open("/dev/null", O_RDONLY);
      const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (in_fd >= 0 && out_fd >= 0 && err_fd >= 0 && ::dup2(in_fd, 0) >= 0 && ::dup2(out_fd, 1) >= 0 &&
          ::dup2(err_fd, 2) >= 0)
        ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    return CliProcess(pid, out, err);
  }

  CliResult run(const std::vector<std::string>& args) { return start(args).wait(); }

  // Writes a manifest into the sandbox and returns its path.
  std::string manifest(const std::string& name, const nlohmann::json& content) const {
    const std::string path = tmp / name;
    const std::string text = content.dump();
    write_bytes(path, std::vector<uint8_t>(text.begin(), text.end()));
    return path;
  }

 private:
  int runs_ = 0;
};

// The lines of a text, without their newlines.
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The last NDJSON event of a `--json` run (the summary).
inline nlohmann::json last_event(const std::string& out) {
  const std::vector<std::string> lines = lines_of(out);
  REQUIRE_FALSE(lines.empty());
  return nlohmann::json::parse(lines.back());
}

// A one-kernel manifest (about a second of NVRTC work per arch).
inline nlohmann::json one_kernel_manifest() {
  return {{"schema", 1},
          {"kernels",
           {{{"family", "sm80"},
             {"head_dim", {128}},
             {"input_dtype", {"bf16"}},
             {"output_dtype", {"bf16"}},
             {"mask", {"causal"}},
             {"layout", {"fixed"}},
             {"lse", {false}}}}}};
}

}  // namespace tsattn::test
