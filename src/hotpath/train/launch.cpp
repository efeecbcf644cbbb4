// `hotpath train --nproc N`: the one-host launcher (launch.h).
#include "hotpath/train/launch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "hotpath/core/error.h"

namespace hotpath::train {
namespace {

// A free loopback port for rank 0's store (bound, read, released: the usual small race).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  HOTPATH_CHECK(fd >= 0, "train --nproc: cannot open a socket: ", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  HOTPATH_CHECK(ok, "train --nproc: cannot find a free port: ", std::strerror(errno));
  return ntohs(addr.sin_port);
}

std::atomic<int> g_forward_signal{0};
extern "C" void on_launcher_signal(int signal) { g_forward_signal.store(signal); }

}  // namespace

void launch_local(int nproc) {
  HOTPATH_CHECK(std::getenv("RANK") == nullptr, "train --nproc: RANK is already set (under torchrun or Slurm, leave --nproc out)");
  std::ifstream cmdline("/proc/self/cmdline", std::ios::binary);
  const std::string raw((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (std::size_t i = 0; i < raw.size();) {
    const std::size_t end = raw.find('\0', i);
    args.push_back(raw.substr(i, end - i));
    i = end == std::string::npos ? raw.size() : end + 1;
  }
  std::vector<std::string> child_args;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--nproc") {
      ++i;  // its value
    } else if (!args[i].starts_with("--nproc=")) {
      child_args.push_back(args[i]);
    }
  }
  const std::string port = std::to_string(free_port());
  std::signal(SIGINT, on_launcher_signal);
  std::signal(SIGTERM, on_launcher_signal);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < nproc; ++rank) {
    const pid_t pid = ::fork();
    HOTPATH_CHECK(pid >= 0, "train --nproc: fork failed: ", std::strerror(errno));
    if (pid == 0) {
      std::signal(SIGINT, SIG_DFL);
      std::signal(SIGTERM, SIG_DFL);
      for (const auto& [k, v] : {std::pair<const char*, std::string>{"RANK", std::to_string(rank)},
                                 {"LOCAL_RANK", std::to_string(rank)}, {"WORLD_SIZE", std::to_string(nproc)},
                                 {"LOCAL_WORLD_SIZE", std::to_string(nproc)}, {"MASTER_ADDR", "127.0.0.1"},
                                 {"MASTER_PORT", port}}) {
        ::setenv(k, v.c_str(), 1);
      }
      std::vector<char*> argv;
      for (auto& s : child_args) argv.push_back(s.data());
      argv.push_back(nullptr);
      ::execv("/proc/self/exe", argv.data());
      std::fprintf(stderr, "hotpath: error: train --nproc: cannot start rank %d: %s\n", rank, std::strerror(errno));
      std::_Exit(127);
    }
    pids.push_back(pid);
  }
  int first_failure = 0, failed_rank = -1, running = nproc;
  bool killed = false;  // by a signal: it printed nothing, so the launcher says which rank
  while (running > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno != EINTR) break;
      if (const int sig = g_forward_signal.exchange(0); sig != 0) {
        for (pid_t p : pids) ::kill(p, sig);
      }
      continue;
    }
    --running;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0 && first_failure == 0) {
      first_failure = code;
      killed = WIFSIGNALED(status);
      for (std::size_t r = 0; r < pids.size(); ++r) {
        if (pids[r] == pid) failed_rank = static_cast<int>(r);
      }
      for (pid_t p : pids) {
        if (p != pid) ::kill(p, SIGTERM);  // the others finish their step, checkpoint (or fail) and exit
      }
    }
  }
  if (killed) {
    std::cerr << "hotpath: error: train --nproc " << nproc << ": rank " << failed_rank << " was killed (signal "
              << first_failure - 128 << "); the other ranks were stopped\n";
  }
  std::exit(first_failure);
}

}  // namespace hotpath::train
