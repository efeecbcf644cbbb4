// The HTTP transport with a fake handler, driven over loopback by raw sockets: keep-alive, answers from
// another thread while other connections are served, limits (413, 431), malformed requests (400), the slow
// client (408 while others are served; a trickled header too), idle close, a dropped Responder (500), the drain,
// and the bounds: connections over --max-connections and requests past --max-buffered-bytes get 503, a 413's body
// is read and dropped so the client sees the answer, not a reset.
#include "hotpath/serve/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace hotpath::serve {
namespace {

using namespace std::chrono_literals;

class Client {
 public:
  explicit Client(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    timeval tv{10, 0};  // no test waits longer for a byte, or for the server to take one
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
  ~Client() { close(); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  [[nodiscard]] bool connected() const { return connected_; }
  void send(const std::string& data) const { ASSERT_EQ(::send(fd_, data.data(), data.size(), MSG_NOSIGNAL), static_cast<ssize_t>(data.size())); }
  // Sends all of `data` (a large body: the server must read it); false when the connection failed (reset).
  bool send_all(std::string_view data) const {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }

  // One whole response (header + Content-Length body), or nullopt when the server closed first.
  std::optional<std::string> read_response() {
    for (;;) {
      const auto end = pending_.find("\r\n\r\n");
      if (end != std::string::npos) {
        std::size_t length = 0;
        const auto cl = pending_.find("Content-Length: ");
        if (cl != std::string::npos && cl < end) length = std::stoul(pending_.substr(cl + 16));
        if (pending_.size() >= end + 4 + length) {
          std::string response = pending_.substr(0, end + 4 + length);
          pending_.erase(0, end + 4 + length);
          return response;
        }
      }
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return std::nullopt;
      pending_.append(buf, static_cast<std::size_t>(n));
    }
  }
  // True when the server closed the connection (recv returned 0) within the receive timeout.
  bool closed_by_server() {
    char c;
    return ::recv(fd_, &c, 1, 0) == 0;
  }

 private:
  int fd_;
  bool connected_ = false;
  std::string pending_;
};

int status_of(const std::optional<std::string>& response) {
  if (!response || response->size() < 12) return -1;
  return std::stoi(response->substr(9, 3));
}

std::string body_of(const std::string& response) { return response.substr(response.find("\r\n\r\n") + 4); }

std::string get(const std::string& path, const std::string& extra = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + extra + "\r\n";
}

std::string post(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string header_of(const std::string& response) { return response.substr(0, response.find("\r\n\r\n")); }

// Polls `done` for up to 5 s.
template <class F>
bool eventually(F done) {
  for (int i = 0; i < 500 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return done();
}

// Echoes method, path and body; "/park" requests are answered later from another thread.
class EchoServer {
 public:
  explicit EchoServer(HttpServerOptions options = {}) {
    options.port = 0;
    server_.emplace(options, [this](HttpRequest request, Responder respond) {
      if (request.path() == "/drop") return;  // the Responder goes away unanswered
      HttpResponse r;
      r.content_type = "text/plain";
      r.body = request.method + " " + request.target + " " + std::string(request.header("x-test")) + " " + request.body;
      if (request.path() == "/park") {
        std::lock_guard lock(mutex_);
        parked_.emplace_back(std::move(respond), std::move(r));
        return;
      }
      respond.send(std::move(r));
    });
    server_->start();
  }
  ~EchoServer() {
    release_parked();
    server_->stop();
  }
  HttpServer& server() { return *server_; }
  int port() { return server_->port(); }
  std::size_t parked() {
    std::lock_guard lock(mutex_);
    return parked_.size();
  }
  // Answers every parked request from a thread that is not an I/O thread.
  void release_parked() {
    std::vector<std::pair<Responder, HttpResponse>> parked;
    {
      std::lock_guard lock(mutex_);
      parked.swap(parked_);
    }
    std::thread([&parked] {
      for (auto& [respond, response] : parked) respond.send(std::move(response));
    }).join();
  }
  bool wait_parked(std::size_t n) {
    for (int i = 0; i < 500 && parked() < n; ++i) std::this_thread::sleep_for(10ms);
    return parked() >= n;
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<Responder, HttpResponse>> parked_;
  std::optional<HttpServer> server_;
};

TEST(HttpServer, ServesSeveralRequestsOnOneKeepAliveConnection) {
  EchoServer s;
  Client c(s.port());
  ASSERT_TRUE(c.connected());
  c.send(get("/a?x=1", "X-Test: hello\r\n"));
  auto r1 = c.read_response();
  ASSERT_EQ(status_of(r1), 200);
  EXPECT_EQ(body_of(*r1), "GET /a?x=1 hello ");
  c.send(post("/b", "payload"));
  auto r2 = c.read_response();
  ASSERT_EQ(status_of(r2), 200);
  EXPECT_EQ(body_of(*r2), "POST /b  payload");
  EXPECT_NE(r2->find("Server: hotpath"), std::string::npos);
}

TEST(HttpServer, ParkedRequestsDoNotBlockOtherConnections) {
  EchoServer s({.io_threads = 1});
  Client parked(s.port());
  parked.send(post("/park", "later"));
  ASSERT_TRUE(s.wait_parked(1));
  EXPECT_EQ(s.server().in_flight(), 1u);
  Client other(s.port());  // served while the first request is parked, with a single I/O thread
  other.send(get("/now"));
  EXPECT_EQ(status_of(other.read_response()), 200);
  s.release_parked();
  auto r = parked.read_response();
  ASSERT_EQ(status_of(r), 200);
  EXPECT_EQ(body_of(*r), "POST /park  later");
  EXPECT_TRUE(s.server().wait_answered(std::chrono::steady_clock::now() + 5s));
}

TEST(HttpServer, AnswersTooLargeBodiesWith413) {
  std::mutex mutex;
  std::vector<int> reported;  // on_transport_error: what the transport answered by itself
  EchoServer s({.max_body_bytes = 100, .on_transport_error = [&](const HttpResponse& r) {
                  std::lock_guard lock(mutex);
                  reported.push_back(r.status);
                }});
  Client c(s.port());
  c.send("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n\r\n");
  auto r = c.read_response();
  ASSERT_EQ(status_of(r), 413);
  EXPECT_NE(body_of(*r).find("{\"error\":\"request body of 101 bytes larger than the limit of 100 bytes"),
            std::string::npos)
      << *r;
  // The server keeps serving.
  Client d(s.port());
  d.send(post("/y", std::string(100, 'a')));
  EXPECT_EQ(status_of(d.read_response()), 200);
  std::lock_guard lock(mutex);
  EXPECT_EQ(reported, std::vector<int>{413});  // the handler's own answers are not reported
}

TEST(HttpServer, AnswersExpect100ContinueBeforeTheBody) {
  EchoServer s;
  Client c(s.port());
  c.send("POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n");
  auto interim = c.read_response();  // curl waits for this before sending a large body
  ASSERT_TRUE(interim.has_value());
  EXPECT_EQ(interim->rfind("HTTP/1.1 100 Continue\r\n\r\n", 0), 0u) << *interim;
  c.send("hello");
  auto r = c.read_response();
  ASSERT_EQ(status_of(r), 200);
  EXPECT_EQ(body_of(*r), "POST /e  hello");
}

TEST(HttpServer, AnswersTooLargeHeadersWith431) {
  EchoServer s({.max_header_bytes = 1024});
  Client c(s.port());
  c.send(get("/x", "X-Big: " + std::string(2000, 'b') + "\r\n"));
  auto r = c.read_response();
  ASSERT_EQ(status_of(r), 431);
  EXPECT_NE(body_of(*r).find("\"error\""), std::string::npos);
}

TEST(HttpServer, AnswersMalformedRequestsWith400) {
  EchoServer s;
  Client c(s.port());
  c.send("GARBAGE\r\n\r\n");
  auto r = c.read_response();
  ASSERT_EQ(status_of(r), 400);
  EXPECT_NE(body_of(*r).find("malformed HTTP request"), std::string::npos);
}

TEST(HttpServer, CutsOffASlowClientWith408WhileOthersAreServed) {
  EchoServer s({.request_timeout = 300ms});
  Client slow(s.port());
  slow.send("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly part of it");
  const auto start = std::chrono::steady_clock::now();
  Client fast(s.port());
  fast.send(get("/fast"));
  EXPECT_EQ(status_of(fast.read_response()), 200);
  auto r = slow.read_response();
  ASSERT_EQ(status_of(r), 408) << (r ? *r : "closed");
  EXPECT_GE(std::chrono::steady_clock::now() - start, 250ms);
  EXPECT_NE(body_of(*r).find("--request-timeout-ms"), std::string::npos);
  EXPECT_NE(r->find("Connection: close"), std::string::npos);
  EXPECT_TRUE(slow.closed_by_server());
}

TEST(HttpServer, ClosesIdleKeepAliveConnections) {
  EchoServer s({.idle_timeout = 200ms});
  Client c(s.port());
  c.send(get("/x"));
  EXPECT_EQ(status_of(c.read_response()), 200);
  EXPECT_TRUE(c.closed_by_server());
}

TEST(HttpServer, ADroppedResponderAnswers500) {
  EchoServer s;
  Client c(s.port());
  c.send(get("/drop"));
  auto r = c.read_response();
  ASSERT_EQ(status_of(r), 500);
  EXPECT_NE(body_of(*r).find("without an answer"), std::string::npos);
}

TEST(HttpServer, DrainRefusesNewConnectionsAndAnswersParkedRequests) {
  EchoServer s;
  Client keep(s.port());  // an open keep-alive connection
  keep.send(get("/first"));
  EXPECT_EQ(status_of(keep.read_response()), 200);
  Client parked(s.port());
  parked.send(post("/park", "in flight"));
  ASSERT_TRUE(s.wait_parked(1));

  s.server().begin_drain();
  EXPECT_TRUE(s.server().draining());
  Client late(s.port());
  EXPECT_FALSE(late.connected());  // the listening socket is closed
  EXPECT_FALSE(s.server().wait_answered(std::chrono::steady_clock::now() + 50ms));

  s.release_parked();
  auto r = parked.read_response();
  ASSERT_EQ(status_of(r), 200);
  EXPECT_EQ(body_of(*r), "POST /park  in flight");
  EXPECT_NE(r->find("Connection: close"), std::string::npos);
  EXPECT_TRUE(s.server().wait_answered(std::chrono::steady_clock::now() + 5s));
  // An existing connection still gets an answer, and is then closed.
  keep.send(get("/second"));
  auto k = keep.read_response();
  EXPECT_EQ(status_of(k), 200);
  EXPECT_NE(k->find("Connection: close"), std::string::npos);
}

TEST(HttpServer, AnswersATrickledHeaderWith408WithinTheRequestTimeout) {
  // The idle timeout is long: only the request timeout, counted from the header's first byte, can end this.
  EchoServer s({.request_timeout = 300ms, .idle_timeout = 60s});
  Client slow(s.port());
  const auto start = std::chrono::steady_clock::now();
  for (const char* part : {"GET /x HT", "TP/1.1\r\n", "Host: "}) {  // never a whole header
    slow.send(part);
    std::this_thread::sleep_for(50ms);
  }
  auto r = slow.read_response();
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(status_of(r), 408) << (r ? *r : "closed without an answer");
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 5s);  // far below the 60 s idle timeout it used to wait for, then close silently
  EXPECT_NE(body_of(*r).find("request header not complete within 300 ms"), std::string::npos) << *r;
  EXPECT_NE(r->find("Connection: close"), std::string::npos);
  EXPECT_TRUE(slow.closed_by_server());
  EXPECT_EQ(s.server().stats().refused.at("request_timeout"), 1u);
}

TEST(HttpServer, Answers413ThenReadsTheRestOfTheBodySoThePlainClientSeesIt) {
  // A plain client (curl, python requests) sends the whole body before it reads: a server that closed with the
  // body unread would reset the connection, and the client would see a reset instead of the 413.
  EchoServer s({.max_body_bytes = 1u << 20});
  Client c(s.port());
  const std::string body(8u << 20, 'x');
  c.send("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n");
  ASSERT_TRUE(c.send_all(body)) << "the server reset the connection instead of reading the body";
  auto r = c.read_response();
  ASSERT_EQ(status_of(r), 413) << (r ? *r : "closed without an answer");
  EXPECT_NE(body_of(*r).find("request body of 8388608 bytes larger than the limit of 1048576 bytes (--max-body-bytes)"),
            std::string::npos);
  EXPECT_TRUE(c.closed_by_server());  // an orderly close (0 from recv), not a reset
  EXPECT_EQ(s.server().stats().refused.at("body_too_large"), 1u);
  EXPECT_TRUE(eventually([&] { return s.server().stats().buffered_bytes == 0; }));
}

TEST(HttpServer, AnswersConnectionsOverTheLimitWith503AndRecovers) {
  EchoServer s({.max_connections = 2});
  Client a(s.port()), b(s.port());
  for (Client* c : {&a, &b}) {
    c->send(get("/admitted"));
    ASSERT_EQ(status_of(c->read_response()), 200);
  }
  EXPECT_EQ(s.server().stats().connections, 2u);
  {
    Client over(s.port());
    ASSERT_TRUE(over.connected());  // accepted, answered, closed: not left hanging in the backlog
    over.send(get("/over"));
    auto r = over.read_response();
    ASSERT_EQ(status_of(r), 503) << (r ? *r : "closed without an answer");
    EXPECT_NE(body_of(*r).find("limit of 2 open connections (--max-connections)"), std::string::npos) << *r;
    EXPECT_NE(header_of(*r).find("Retry-After: 1"), std::string::npos);
    EXPECT_TRUE(over.closed_by_server());
  }
  EXPECT_EQ(s.server().stats().refused.at("connections"), 1u);
  b.send(get("/still-served"));  // the admitted ones are unaffected
  EXPECT_EQ(status_of(b.read_response()), 200);
  a.close();
  ASSERT_TRUE(eventually([&] { return s.server().stats().connections < 2; }));
  Client later(s.port());
  later.send(get("/later"));
  EXPECT_EQ(status_of(later.read_response()), 200);
}

TEST(HttpServer, AnswersRequestsPastTheBufferedByteBudgetWith503BeforeReadingThem) {
  constexpr std::size_t kBody = 1u << 20;
  EchoServer s({.max_body_bytes = kBody, .max_header_bytes = 16u << 10,
                .max_buffered_bytes = kBody + (16u << 10) + (100u << 10)});
  // A holds a 1 MiB request half sent: its whole Content-Length is reserved once its header is read.
  Client a(s.port());
  a.send("POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(kBody) + "\r\n\r\n");
  ASSERT_TRUE(a.send_all(std::string(kBody / 2, 'a')));
  ASSERT_TRUE(eventually([&] { return s.server().stats().buffered_bytes > kBody; }));
  // B's 200 KiB do not fit beside it: 503 at once, its body drained, the connection closed in order.
  const std::string b_body(200u << 10, 'b');
  Client b(s.port());
  b.send("POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(b_body.size()) + "\r\n\r\n");
  ASSERT_TRUE(b.send_all(b_body));
  auto rb = b.read_response();
  ASSERT_EQ(status_of(rb), 503) << (rb ? *rb : "closed without an answer");
  EXPECT_NE(body_of(*rb).find("(--max-buffered-bytes): retry later"), std::string::npos) << *rb;
  EXPECT_NE(header_of(*rb).find("Retry-After: 1"), std::string::npos);
  EXPECT_TRUE(b.closed_by_server());
  // Small requests still fit; A finishes; then B's request fits too.
  Client small(s.port());
  small.send(get("/small"));
  EXPECT_EQ(status_of(small.read_response()), 200);
  ASSERT_TRUE(a.send_all(std::string(kBody / 2, 'a')));
  auto ra = a.read_response();
  ASSERT_EQ(status_of(ra), 200);
  EXPECT_EQ(body_of(*ra).size(), std::string("POST /a  ").size() + kBody);
  EXPECT_TRUE(eventually([&] { return s.server().stats().buffered_bytes == 0; }));
  Client b2(s.port());
  b2.send(post("/b", b_body));
  EXPECT_EQ(status_of(b2.read_response()), 200);
  const TransportStats stats = s.server().stats();
  EXPECT_EQ(stats.refused.at("buffered_bytes"), 1u);
  EXPECT_EQ(stats.max_buffered_bytes, kBody + (16u << 10) + (100u << 10));
  EXPECT_EQ(stats.max_request_bytes, kBody + (16u << 10));
}

TEST(HttpServer, RefusesABufferedByteBudgetSmallerThanOneRequest) {
  EXPECT_THROW(HttpServer({.max_body_bytes = 1u << 20, .max_buffered_bytes = 1u << 20}, [](HttpRequest, Responder) {}),
               std::exception);
}

TEST(HttpServer, RequestStopWakesTheSignalWait) {
  EchoServer s;
  std::thread t([&] { s.server().request_stop(); });
  EXPECT_EQ(s.server().wait_for_signal(), 0);
  t.join();
}

TEST(HttpServer, RefusesABusyPort) {
  EchoServer s;
  HttpServer second({.port = s.port()}, [](HttpRequest, Responder) {});
  EXPECT_THROW(second.start(), std::exception);
}

}  // namespace
}  // namespace hotpath::serve
