// hotpath/serve/http_server.h — the server's HTTP/1.1 transport (Boost.Beast/Asio behind a torch-free,
// Beast-free interface): a few I/O threads, keep-alive, header and body limits, idle and per-request
// timeouts, bounded connections and buffered bytes, and responses that may be completed later from any thread,
// so a request can be parked for a batcher without holding a thread. Drain: stop accepting, answer what is in
// flight, then stop. Every answer the transport gives itself (400/408/413/431/503) is JSON, and the request's
// remaining bytes are read and dropped (bounded) before the close, so the client reads it instead of a reset.
//
//   HttpServer server({.port = 0, .io_threads = 1}, [](HttpRequest req, Responder respond) {
//     respond.send({.status = 200, .content_type = "text/plain", .body = "ok"});   // now or later, any thread
//   });
//   server.start(); server.wait_for_signal(); server.begin_drain(); server.wait_answered(deadline); server.stop();
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hotpath/serve/metrics.h"  // TransportStats

namespace hotpath::serve {

namespace detail {
struct ServerImpl;  // http_server.cpp
}

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // "/v2/models/x/infer?a=b" as sent
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  std::chrono::steady_clock::time_point received;  // when the whole request had been read

  // The first header named `name` (lower case), or empty.
  [[nodiscard]] std::string_view header(std::string_view name) const;
  [[nodiscard]] bool has_header(std::string_view name) const;
  [[nodiscard]] std::string_view path() const;   // target without the query
  [[nodiscard]] std::string_view query() const;  // after '?', or empty
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers (Retry-After, Allow, ...)
  std::string body;
};

// {"error": message} as a response with `status` (what every 4xx/5xx of the server looks like).
HttpResponse json_error(int status, std::string_view message);

// The one answer to one request. Copyable (every copy is the same answer); the first send() wins, later
// ones are ignored; safe from any thread: the write is posted onto the connection's own strand. When the
// last copy goes away unanswered the client gets a 500, never a hung connection.
class Responder {
 public:
  struct State;
  explicit Responder(std::shared_ptr<State> state);
  void send(HttpResponse response) const;

 private:
  std::shared_ptr<State> state_;
};

using HttpHandler = std::function<void(HttpRequest request, Responder respond)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: the OS picks a free port (see port())
  int io_threads = 1;
  // One connection's budget: it holds at most one request (header + body) at a time; its pipelined requests wait
  // in the kernel until its answer is written.
  std::size_t max_body_bytes = 64u << 20;    // larger → 413 (as soon as Content-Length says so), rest drained
  std::size_t max_header_bytes = 16u << 10;  // larger → 431
  // All connections together: request bytes held from a request's first byte until its answer is written (a body
  // with a Content-Length counts whole once its header is read). A request that would pass it → 503 +
  // Retry-After before its body is read, then the body is drained and the connection closed.
  std::size_t max_buffered_bytes = 256u << 20;
  // Open connections; one more is answered 503 + Retry-After at once and closed (its request drained, so the
  // client reads the 503, not a reset). Past 64 such refusals in progress, a connection is closed unanswered.
  std::size_t max_connections = 512;
  // From a request's first byte until it is all read; a client that never finishes gets 408 and is closed.
  std::chrono::milliseconds request_timeout{30000};
  std::chrono::milliseconds idle_timeout{60000};   // a keep-alive connection with no request is closed
  std::chrono::milliseconds write_timeout{30000};  // a client that does not read its answer is closed
  // Called (on an I/O thread) for each answer the transport gives itself, never reaching the handler:
  // 400 malformed HTTP, 408, 413, 431, 503 (connection or buffered-byte limit). The server logs these beside the
  // handler's requests.
  std::function<void(const HttpResponse& response)> on_transport_error = nullptr;
};

class HttpServer {
 public:
  // `handler` runs on an I/O thread; it must not block (park the Responder instead).
  HttpServer(HttpServerOptions options, HttpHandler handler);
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  ~HttpServer();  // stop()

  // Binds and listens (hotpath::Error naming host:port when it cannot), then starts the I/O threads.
  void start();
  [[nodiscard]] int port() const;  // the bound port (after start)

  // Blocks until SIGTERM or SIGINT arrives (installed by start()) or request_stop() is called; returns the
  // signal number (0 for request_stop).
  int wait_for_signal();
  void request_stop();

  // Closes the listening socket (new connections are refused); every later response says Connection: close.
  void begin_drain();
  [[nodiscard]] bool draining() const;
  // Requests handed to the handler whose response is not yet written.
  [[nodiscard]] std::size_t in_flight() const;
  // Waits until in_flight() is 0 or `deadline`; true when everything was answered.
  bool wait_answered(std::chrono::steady_clock::time_point deadline);
  // Connections, buffered bytes, their limits and what the transport refused (for /metrics). Any thread.
  [[nodiscard]] TransportStats stats() const;
  // Closes every connection and joins the I/O threads. Idempotent.
  void stop();

 private:
  std::shared_ptr<detail::ServerImpl> impl_;
};

}  // namespace hotpath::serve
