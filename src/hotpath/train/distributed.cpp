// DistEnv from the environment, the store, the start-up agreement check and the blocking collectives
// (distributed.h). The backends themselves are built in gloo_backend.cpp and nccl_backend.cpp.
#include "hotpath/train/distributed.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/Logging.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <nlohmann/json.hpp>

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "dist_impl.h"
#include "hotpath/core/error.h"

namespace hotpath::train {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

int env_int(const char* name, int lo, int hi) {
  const std::string text = env(name);
  int value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  HOTPATH_CHECK(ec == std::errc() && ptr == text.data() + text.size() && value >= lo && value <= hi,
                "distributed: $", name, "='", text, "': expected an integer in [", lo, ", ", hi, "]");
  return value;
}

std::vector<std::uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<std::uint8_t>& b) { return {b.begin(), b.end()}; }

// One line from an exception (c10::Error: without its backtrace; gloo's "[file:line] message" kept).
std::string first_line(std::string s) {
  const auto nl = s.find('\n');
  if (nl != std::string::npos) s.resize(nl);
  return s;
}

// A socket closed when it goes out of scope.
class ScopedSocket {
 public:
  explicit ScopedSocket(int fd) : fd_(fd) {}
  ~ScopedSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  ScopedSocket(const ScopedSocket&) = delete;
  ScopedSocket& operator=(const ScopedSocket&) = delete;
  [[nodiscard]] int get() const { return fd_; }

 private:
  int fd_;
};

// Whether a TCP connection to `host`:`port` can be made before `deadline` (a listener is there). Each attempt is
// a non-blocking connect bounded by the deadline: a remote host that drops SYNs would otherwise hold a blocking
// connect for minutes.
bool listener_reachable(const std::string& host, int port, std::chrono::steady_clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return false;
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  for (const addrinfo* a = list.get(); a != nullptr; a = a->ai_next) {
    const ScopedSocket fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (fd.get() < 0) continue;
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0) return true;
    if (errno != EINPROGRESS) continue;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd.get(), POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0))) != 1) continue;
    int error = 0;
    socklen_t len = sizeof(error);
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error == 0) return true;
  }
  return false;
}

// c10d's TCPStore client blocks in recv() without a timeout when the store's host stops answering (SIGSTOP, a hung
// host: the kernel keeps the connection open), and exposes no handle on its socket. It is the one descriptor the
// constructor opened that is connected to the store's port (from another local port: not the server's accepted
// end); found by comparing the open descriptors (number and what each names: a number may be reused) before and
// after, so that every store call can be bounded.
std::map<int, std::string> open_descriptors() {
  std::map<int, std::string> fds;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const std::string name = entry.path().filename().string();
    int fd = -1;
    if (std::from_chars(name.data(), name.data() + name.size(), fd).ec != std::errc()) continue;
    std::error_code link_ec;
    fds[fd] = std::filesystem::read_symlink(entry.path(), link_ec).string();
  }
  return fds;
}

int port_of(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return -1;
}

int store_client_socket(const std::map<int, std::string>& before, int port) {
  int found = -1;
  for (const auto& [fd, target] : open_descriptors()) {
    if (const auto it = before.find(fd); it != before.end() && it->second == target) continue;
    sockaddr_storage peer{}, self{};
    socklen_t peer_len = sizeof(peer), self_len = sizeof(self);
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &self_len) != 0) {
      continue;
    }
    if (port_of(peer) != port || port_of(self) == port) continue;
    if (found >= 0) return -1;  // ambiguous: leave c10d's calls unbounded rather than bound another socket
    found = fd;
  }
  return found;
}

// A store call on `fd` that gets no reply within `limit` fails (c10d: a DistNetworkError) instead of blocking.
void bound_store_calls(int fd, std::chrono::milliseconds limit) {
  if (fd < 0) return;
  const std::int64_t ms = std::max<std::int64_t>(limit.count(), 1);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

}  // namespace

std::string exception_line(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return first_line(c->what_without_backtrace());
  return first_line(e.what());
}

DistEnv dist_env_from_environment() {
  DistEnv e;
  constexpr int kMaxRanks = 1 << 20;
  if (env("WORLD_SIZE") != nullptr || env("RANK") != nullptr) {
    HOTPATH_CHECK(env("WORLD_SIZE") && env("RANK"), "distributed: $RANK and $WORLD_SIZE must be set together (",
                  env("RANK") ? "$WORLD_SIZE" : "$RANK", " is missing)");
    e.launcher = env("TORCHELASTIC_RUN_ID") ? "torchrun" : "env";
    e.world_size = env_int("WORLD_SIZE", 1, kMaxRanks);
    e.rank = env_int("RANK", 0, e.world_size - 1);
    e.local_rank = env("LOCAL_RANK") ? env_int("LOCAL_RANK", 0, e.world_size - 1) : e.rank;
    e.local_world_size = env("LOCAL_WORLD_SIZE") ? env_int("LOCAL_WORLD_SIZE", 1, e.world_size) : e.world_size;
  } else if (env("SLURM_PROCID") != nullptr && env("SLURM_NTASKS") != nullptr) {
    e.launcher = "slurm";
    e.world_size = env_int("SLURM_NTASKS", 1, kMaxRanks);
    e.rank = env_int("SLURM_PROCID", 0, e.world_size - 1);
    e.local_rank = env("SLURM_LOCALID") ? env_int("SLURM_LOCALID", 0, e.world_size - 1) : 0;
    e.local_world_size = env("SLURM_NTASKS_PER_NODE") ? env_int("SLURM_NTASKS_PER_NODE", 1, e.world_size) : 1;
  } else {
    return e;
  }
  HOTPATH_CHECK(e.local_rank < e.local_world_size, "distributed: LOCAL_RANK ", e.local_rank,
                " is not below LOCAL_WORLD_SIZE ", e.local_world_size);
  if (!e.distributed()) return e;
  HOTPATH_CHECK(env("MASTER_ADDR") && env("MASTER_PORT"), "distributed: ", e.launcher,
                " gave rank ", e.rank, " of ", e.world_size, " but $MASTER_ADDR/$MASTER_PORT are not set");
  e.master_addr = env("MASTER_ADDR");
  e.master_port = env_int("MASTER_PORT", 1, 65535);
  const char* agent = env("TORCHELASTIC_USE_AGENT_STORE");
  e.agent_store = agent != nullptr && (std::string(agent) == "True" || std::string(agent) == "1");
  e.restart_count = env("TORCHELASTIC_RESTART_COUNT") ? env_int("TORCHELASTIC_RESTART_COUNT", 0, kMaxRanks) : 0;
  return e;
}

std::chrono::milliseconds dist_timeout(double seconds) {
  double s = seconds;
  if (const char* v = env("HOTPATH_DIST_TIMEOUT_S")) {
    const std::string t = v;
    const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), s);
    HOTPATH_CHECK(ec == std::errc() && ptr == t.data() + t.size() && s >= 0.001 && s <= 86400,
                  "distributed: $HOTPATH_DIST_TIMEOUT_S='", t, "': expected seconds in [0.001, 86400]");
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(s * 1000)));
}

GradSyncOptions grad_sync_options_with_environment(GradSyncOptions o) {
  if (const char* v = env("HOTPATH_DDP_OVERLAP")) {
    const std::string s = v;
    HOTPATH_CHECK(s == "0" || s == "1", "distributed: $HOTPATH_DDP_OVERLAP='", s, "': expected 0 or 1");
    o.overlap = s == "1";
  }
  if (env("HOTPATH_DDP_BUCKET_MB") != nullptr) {
    o.bucket_bytes = std::int64_t{env_int("HOTPATH_DDP_BUCKET_MB", 1, 4096)} << 20;
  }
  return o;
}

namespace {

// A rank's own fatal error (report_rank_error): "error/<rank>" holds its message, "errors" counts them.
std::string error_key(int rank) { return "error/" + std::to_string(rank); }

// The first rank other than `rank` that reported a fatal error, with its message, or nullopt.
std::optional<std::pair<int, std::string>> reported_error(c10d::Store& store, int rank, int world_size) {
  if (store.add("errors", 0) == 0) return std::nullopt;
  for (int r = 0; r < world_size; ++r) {
    if (r != rank && store.check({error_key(r)})) return std::make_pair(r, text(store.get(error_key(r))));
  }
  return std::nullopt;
}

// store.get(key), except that a rank that reported a fatal error meanwhile stops this one at once, naming it
// (instead of waiting out the timeout for a key it will never write). `what` names the wait in messages.
std::vector<std::uint8_t> get_or_fail(c10d::Store& store, const std::string& key, int rank, int world_size,
                                      const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + store.getTimeout();
  while (!store.check({key})) {
    if (const auto error = reported_error(store, rank, world_size)) {
      store.add("errors_seen", 1);  // the reporter (if it hosts the store) may go now
      HOTPATH_CHECK(false, "distributed: rank ", rank, ": ", what, ": rank ", error->first,
                    " stopped with an error: ", error->second);
    }
    HOTPATH_CHECK(std::chrono::steady_clock::now() < deadline, "distributed: rank ", rank, ": ", what,
                  ": no answer within ", std::chrono::duration<double>(store.getTimeout()).count(),
                  " s (did every rank start? train.dist_timeout_s)");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return store.get(key);
}

// Every rank publishes {world_size, keys}; each compares with rank 0's and reports a verdict; rank 0
// publishes the first bad verdict (or ""), so every rank stops with the same line or none does.
void check_agreement(c10d::Store& store, int rank, int world_size, const AgreementKeys& keys) {
  const std::string what = "start-up (the recipe agreement)";
  nlohmann::ordered_json mine;
  mine["world_size"] = world_size;
  for (const auto& [k, v] : keys) mine["keys"][k] = v;
  store.set("agree/" + std::to_string(rank), bytes(mine.dump()));
  std::string verdict;
  if (rank != 0) {
    const auto theirs = nlohmann::ordered_json::parse(text(get_or_fail(store, "agree/0", rank, world_size, what)));
    if (theirs["world_size"] != mine["world_size"]) {
      verdict = "distributed: rank " + std::to_string(rank) + " was started for a world of " +
                std::to_string(world_size) + " ranks, rank 0 for " + theirs["world_size"].dump() +
                " (WORLD_SIZE must be the same on every rank)";
    } else {
      const auto& a = theirs.contains("keys") ? theirs["keys"] : nlohmann::ordered_json::object();
      const auto& b = mine.contains("keys") ? mine["keys"] : nlohmann::ordered_json::object();
      for (const auto& [k, v] : b.items()) {
        if (!a.contains(k) || a[k] != v) {
          const bool flag = k.starts_with("--");  // a command-line option, not a recipe key
          verdict = "distributed: rank " + std::to_string(rank) + "'s " + (flag ? "command line" : "recipe") +
                    " differs from rank 0's at " + k + " (" + v.get<std::string>() + " on rank " +
                    std::to_string(rank) + ", " + (a.contains(k) ? a[k].get<std::string>() : std::string("absent")) +
                    " on rank 0); every rank must " +
                    (flag ? "be started with the same " + k + " option" : std::string("run the same recipe"));
          break;
        }
      }
      if (verdict.empty() && a.size() != b.size()) {
        verdict = "distributed: rank " + std::to_string(rank) + "'s recipe has other keys than rank 0's";
      }
    }
    store.set("verdict/" + std::to_string(rank), bytes(verdict));
  } else {
    for (int r = 1; r < world_size && verdict.empty(); ++r) {
      verdict = text(get_or_fail(store, "verdict/" + std::to_string(r), rank, world_size, what));
    }
    store.set("verdict/all", bytes(verdict));
    // A refusal: rank 0 may host the store (a plain RANK/WORLD_SIZE launch), so it leaves only once every rank
    // has read the verdict (bounded), or they would see a closed connection instead of the line.
    const auto deadline = std::chrono::steady_clock::now() + std::min<std::chrono::milliseconds>(
                                                                  std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                      store.getTimeout()),
                                                                  std::chrono::seconds(10));
    while (!verdict.empty() && store.add("verdict_seen", 0) < world_size - 1 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (rank != 0) {
    verdict = text(get_or_fail(store, "verdict/all", rank, world_size, what));
    store.add("verdict_seen", 1);
  }
  HOTPATH_CHECK(verdict.empty(), verdict);
}

// c10d's TCPStore constructor, bounded by o.timeout (what is left of `timeout`, the one named in the error). Its validation reads the server's first reply with no
// timeout, so a listener that accepts but never answers (the store's host stopped after it opened the store, or
// another program on that port) would hold it for ever; then the constructing thread is left behind, blocked in
// recv() until the process exits (the only way to stop a call c10d gives no handle on), and this rank fails.
c10::intrusive_ptr<c10d::TCPStore> connect_bounded(const DistEnv& env, const c10d::TCPStoreOptions& o,
                                                   std::chrono::milliseconds timeout) {
  if (o.isServer) return c10::make_intrusive<c10d::TCPStore>(env.master_addr, o);
  auto made = std::make_shared<std::promise<c10::intrusive_ptr<c10d::TCPStore>>>();
  auto result = made->get_future();
  std::thread([made, host = env.master_addr, o] {
    try {
      made->set_value(c10::make_intrusive<c10d::TCPStore>(host, o));
    } catch (...) {
      made->set_exception(std::current_exception());
    }
  }).detach();
  HOTPATH_CHECK(result.wait_for(o.timeout) == std::future_status::ready, "distributed: rank ", env.rank,
                " could not reach the store at ", env.master_addr, ":", env.master_port, " within ",
                timeout.count() / 1000.0, " s (MASTER_ADDR/MASTER_PORT; HOTPATH_DIST_TIMEOUT_S): ",
                "it accepted the connection but did not answer (its host stopped or hangs, or another program "
                "listens there)");
  return result.get();
}

// The job's TCPStore: rank 0's own (a plain RANK/WORLD_SIZE launch) or a client of it or of torchrun's agent,
// connected within `timeout`. c10d's client alone takes up to 2 × timeout + a 1–3 s backoff when nothing
// listens yet (its first connect waits the whole timeout, then it sleeps and tries again with the whole
// timeout), so a client first waits here for the listener, up to the deadline; then c10d connects at once.
struct OpenStore {
  c10::intrusive_ptr<c10d::TCPStore> tcp;
  int socket = -1;  // its client socket (store_client_socket), each call bounded by the timeout
};

OpenStore open_store(const DistEnv& env, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(env.master_port);
  o.isServer = env.rank == 0 && !env.agent_store;
  o.numWorkers = static_cast<std::size_t>(env.world_size);
  o.waitWorkers = false;
  o.timeout = timeout;
  if (!o.isServer) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!listener_reachable(env.master_addr, env.master_port, deadline)) {
      HOTPATH_CHECK(std::chrono::steady_clock::now() < deadline, "distributed: rank ", env.rank,
                    " could not reach the store at ", env.master_addr, ":", env.master_port, " within ",
                    timeout.count() / 1000.0, " s (MASTER_ADDR/MASTER_PORT; HOTPATH_DIST_TIMEOUT_S): nothing "
                    "accepted a connection there (did rank 0 or torchrun start?)");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    // The listener is up: c10d's connect succeeds at once (a floor of 1 s: c10d may round its connect timeout
    // down to whole seconds).
    o.timeout = std::max<std::chrono::milliseconds>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()),
        std::chrono::seconds(1));
  }
  const std::map<int, std::string> before = open_descriptors();
  OpenStore out{connect_bounded(env, o, timeout), -1};
  out.tcp->setTimeout(timeout);  // every later wait: the whole timeout
  // No reply to one call within the timeout: the host stopped answering (a wait's own deadline is a poll in c10d).
  out.socket = store_client_socket(before, env.master_port);
  bound_store_calls(out.socket, timeout);
  return out;
}

std::unique_ptr<DistContext::Impl> make_impl(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
                                             std::chrono::milliseconds timeout, const AgreementKeys& keys,
                                             at::Device device, int store_socket = -1) {
  auto impl = std::make_unique<DistContext::Impl>();
  impl->store = store;
  impl->store_socket = store_socket;
  impl->rank = rank;
  impl->world_size = world_size;
  impl->timeout = timeout;
  impl->device = device;
  HOTPATH_CHECK(device.is_cpu() || device.is_cuda(), "distributed: rank ", rank, ": device ", device.str(),
                " has no process group backend (Gloo: cpu, NCCL: cuda)");
#ifndef HOTPATH_WITH_NCCL
  HOTPATH_CHECK(device.is_cpu(), "distributed: rank ", rank, ": device ", device.str(),
                " needs the NCCL backend, which this build does not have (built without HOTPATH_TORCH_CUDA or without the nvidia-nccl wheel's nccl.h)");
#endif
  check_agreement(*store, rank, world_size, keys);
  const char* name = device.is_cuda() ? "NCCL" : "Gloo";
  try {
#ifdef HOTPATH_WITH_NCCL
    if (device.is_cuda()) {
      impl->backend_name = "nccl";
      impl->backend = make_nccl_backend(c10::make_intrusive<c10d::PrefixStore>("nccl", store), rank, world_size,
                                        timeout, device);
    }
#endif
    if (device.is_cpu()) {
      impl->backend = make_gloo_backend(c10::make_intrusive<c10d::PrefixStore>("gloo", store), rank, world_size,
                                        timeout, /*threads=*/1);
    }
  } catch (const std::exception& e) {
    HOTPATH_CHECK(false, "distributed: rank ", rank, " of ", world_size, ": the ", name,
                  " process group did not form within ", timeout.count() / 1000.0, " s",
                  device.is_cpu() ? " (set GLOO_SOCKET_IFNAME to an interface the ranks reach each other on)" : "",
                  ": ", exception_line(e));
  }
  return impl;
}

// model.sync_batchnorm's collectives on the job's process group.
class DistBatchNormGroup final : public models::BatchNormGroup {
 public:
  explicit DistBatchNormGroup(DistContext& dist) : dist_(dist) {}
  [[nodiscard]] int world_size() const override { return dist_.world_size(); }
  void all_reduce_sum(at::Tensor& tensor, const std::string& what) override { dist_.all_reduce_sum(tensor, what); }

 private:
  DistContext& dist_;
};

}  // namespace

DistContext::DistContext(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DistContext::~DistContext() = default;

std::unique_ptr<DistContext> DistContext::connect(const DistEnv& env, std::chrono::milliseconds timeout,
                                                  const AgreementKeys& keys, at::Device device) {
  HOTPATH_CHECK(env.distributed(), "distributed: connect() needs a world of more than one rank");
  // c10d logs each failed connect/collective with a backtrace; hotpath reports them as one line instead.
  // TORCH_CPP_LOG_LEVEL set by the user keeps its say.
  if (std::getenv("TORCH_CPP_LOG_LEVEL") == nullptr) FLAGS_caffe2_log_level = 3;  // FATAL only
  OpenStore tcp;
  try {
    tcp = open_store(env, timeout);
  } catch (const hotpath::Error&) {
    throw;
  } catch (const std::exception& e) {
    const bool server = env.rank == 0 && !env.agent_store;
    HOTPATH_CHECK(false, "distributed: rank ", env.rank, " could not ", server ? "open" : "reach", " the store at ",
                  env.master_addr, ":", env.master_port, " within ", timeout.count() / 1000.0,
                  " s (MASTER_ADDR/MASTER_PORT; HOTPATH_DIST_TIMEOUT_S): ", exception_line(e));
  }
  auto store = c10::make_intrusive<c10d::PrefixStore>("hotpath/" + std::to_string(env.restart_count), tcp.tcp);
  try {
    return std::unique_ptr<DistContext>(
        new DistContext(make_impl(store, env.rank, env.world_size, timeout, keys, device, tcp.socket)));
  } catch (const hotpath::Error&) {
    throw;
  } catch (const std::exception& e) {
    HOTPATH_CHECK(false, "distributed: rank ", env.rank, " of ", env.world_size, ": start-up failed within ",
                  timeout.count() / 1000.0, " s (did every rank start?): ", exception_line(e));
  }
}

std::unique_ptr<DistContext> DistContext::connect_file(const std::string& path, int rank, int world_size,
                                                       std::chrono::milliseconds timeout, const AgreementKeys& keys,
                                                       at::Device device) {
  auto file = c10::make_intrusive<c10d::FileStore>(path, world_size);
  file->setTimeout(timeout);
  return std::unique_ptr<DistContext>(new DistContext(make_impl(file, rank, world_size, timeout, keys, device)));
}

int DistContext::rank() const { return impl_->rank; }
int DistContext::world_size() const { return impl_->world_size; }
at::Device DistContext::device() const { return impl_->device; }
const char* DistContext::backend_name() const { return impl_->backend_name; }

void DistContext::fail(const std::string& what, const std::string& cause) {
  // One short window for both questions, as it comes on top of the timeout that brought this rank here: did a
  // rank stop on an error of its own (reported on its way out)? which ranks saw the failure too (the ones alive
  // do within moments; the others are named)?
  constexpr std::chrono::milliseconds kWindow{1500};
  const auto deadline = std::chrono::steady_clock::now() + kWindow;
  std::vector<int> silent;
  std::optional<std::pair<int, std::string>> error;
  bound_store_calls(impl_->store_socket, kWindow);  // a store host that stopped answering is named, not waited for
  try {
    auto& store = *impl_->store;
    store.set("failed/" + std::to_string(impl_->rank), bytes(cause));
    while (true) {
      if ((error = reported_error(store, impl_->rank, impl_->world_size))) break;
      silent.clear();
      for (int r = 0; r < impl_->world_size; ++r) {
        if (r != impl_->rank && !store.check({"failed/" + std::to_string(r)})) silent.push_back(r);
      }
      if (silent.empty() || std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } catch (const std::exception&) {
    silent = {0};  // the store is gone: without torchrun's agent, rank 0 hosted it
  }
  HOTPATH_CHECK(!error, "distributed: rank ", impl_->rank, ": ", what, " failed: rank ", error->first,
                " stopped with an error: ", error->second);
  std::string who;
  for (int r : silent) who += (who.empty() ? "rank " : ", rank ") + std::to_string(r);
  HOTPATH_CHECK(false, "distributed: rank ", impl_->rank, ": ", what, " failed: ",
                who.empty() ? std::string("every rank saw the error") : who + " stopped answering (died or hung)",
                " (timeout ", impl_->timeout.count() / 1000.0, " s, train.dist_timeout_s) — ", cause);
}

void DistContext::all_reduce_sum(at::Tensor& tensor, const std::string& what) {
  const bool copy = tensor.device() != impl_->device || !tensor.is_contiguous();
  std::vector<at::Tensor> v{copy ? tensor.to(impl_->device).contiguous() : tensor};
  try {
    impl_->backend->allreduce(v)->wait();
  } catch (const std::exception& e) {
    fail(what, exception_line(e));
  }
  if (copy) tensor.copy_(v[0]);
}

void DistContext::broadcast(std::vector<at::Tensor>& tensors, int root, const std::string& what) {
  try {
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    std::vector<at::Tensor> on_device;  // the backend's copies of tensors that live elsewhere
    for (auto& t : tensors) {
      on_device.push_back(t.device() == impl_->device && t.is_contiguous() ? t : t.to(impl_->device).contiguous());
      std::vector<at::Tensor> one{on_device.back()};
      c10d::BroadcastOptions o;
      o.rootRank = root;
      works.push_back(impl_->backend->broadcast(one, o));
    }
    for (auto& w : works) w->wait();
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (!on_device[i].is_same(tensors[i])) tensors[i].copy_(on_device[i]);
    }
  } catch (const std::exception& e) {
    fail(what, exception_line(e));
  }
}

std::string DistContext::broadcast_string(const std::string& key, const std::string& value) {
  try {
    if (impl_->rank == 0) {
      impl_->store->set("bcast/" + key, bytes(value));
      return value;
    }
    return text(get_or_fail(*impl_->store, "bcast/" + key, impl_->rank, impl_->world_size, "sharing " + key));
  } catch (const hotpath::Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("sharing " + key, exception_line(e));
  }
}

void DistContext::barrier(const std::string& what) {
  at::Tensor t = at::zeros({1}, at::TensorOptions(impl_->device));
  all_reduce_sum(t, what);
}

void report_rank_error(const DistEnv& env, std::chrono::milliseconds timeout, const std::string& message) {
  if (!env.distributed()) return;
  // A failure that already names other ranks (fail(), get_or_fail()) is the group's, not this rank's own: the
  // others see it themselves, and a rank 0 hosting the store would wait for acknowledgements from dead ranks.
  // So is a wait that timed out (the store, the agreement, the process group): the ranks it waited for are the
  // missing ones, and reporting would add up to another timeout to the one that just passed.
  for (const char* group_failure : {" stopped answering ", " stopped with an error: ", "every rank saw the error",
                                    ": no answer within ", " process group did not form within ",
                                    " the store at ", ": start-up failed within "}) {
    if (message.find(group_failure) != std::string::npos) return;
  }
  try {
    // Best effort, bounded: the store may be gone (rank 0 hosted it) or never have existed.
    const auto wait = std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(10));
    const bool server = env.rank == 0 && !env.agent_store;
    c10d::PrefixStore store("hotpath/" + std::to_string(env.restart_count), open_store(env, wait).tcp);
    store.set(error_key(env.rank), bytes(message));
    store.add("errors", 1);
    if (server) {  // this process hosts the store: keep it up until every other rank has read the error
      const auto deadline = std::chrono::steady_clock::now() + wait;
      while (store.add("errors_seen", 0) < env.world_size - 1 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  } catch (const std::exception&) {
  }
}

void report_this_rank_error(const std::exception& error) noexcept {
  try {
    std::string line = error.what();
    line = line.substr(0, line.find('\n'));
    report_rank_error(dist_env_from_environment(), dist_timeout(), line);
  } catch (const std::exception&) {
  }
}

std::shared_ptr<models::BatchNormGroup> batchnorm_group(DistContext& dist) {
  return std::make_shared<DistBatchNormGroup>(dist);
}

}  // namespace hotpath::train
