// The HTTP/1.1 transport on Boost.Beast/Asio (the only TU that sees Beast: it compiles slowly).
//
// One Connection per socket, on its own strand. A connection is always in one phase: waiting for a request
// (idle timeout), reading one (request timeout from its first byte), parked (the handler holds a Responder;
// no timer, no read: the batcher may take its time), or writing (write timeout). Timeouts are our own timer
// rather than beast::tcp_stream's, because tcp_stream closes the socket on expiry and a slow client must
// still get its 408.
#include <utility>  // Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "hotpath/core/error.h"
#include "hotpath/serve/http_server.h"

namespace hotpath::serve {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::string_view HttpRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key == name) return value;
  }
  return {};
}

bool HttpRequest::has_header(std::string_view name) const {
  return std::any_of(headers.begin(), headers.end(), [&](const auto& h) { return h.first == name; });
}

std::string_view HttpRequest::path() const {
  const std::string_view t = target;
  return t.substr(0, t.find('?'));
}

std::string_view HttpRequest::query() const {
  const auto q = target.find('?');
  return q == std::string::npos ? std::string_view{} : std::string_view(target).substr(q + 1);
}

HttpResponse json_error(int status, std::string_view message) {
  HttpResponse r;
  r.status = status;
  // One line, whatever the message: a line break becomes a space (one_line_message() folds them better upstream).
  std::string line(message);
  std::replace_if(line.begin(), line.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  // error_handler_t::replace: a message quoting a client's invalid UTF-8 must still be valid JSON.
  r.body = nlohmann::json{{"error", std::move(line)}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

namespace {

class Connection;

// Whether responses may still be posted: closed by stop() before the io_context goes away, so a batcher
// thread finishing late never posts onto a dead executor.
struct Gate {
  std::mutex mutex;
  bool open = true;
};

}  // namespace

struct detail::ServerImpl {
  HttpServerOptions options;
  HttpHandler handler;
  asio::io_context ioc;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  tcp::acceptor acceptor{asio::make_strand(ioc)};
  std::optional<asio::signal_set> signals;
  std::vector<std::thread> threads;
  std::shared_ptr<Gate> gate = std::make_shared<Gate>();
  std::atomic<bool> draining{false};
  bool stopped = false;
  int bound_port = 0;

  std::mutex connections_mutex;
  std::unordered_map<const Connection*, std::shared_ptr<Connection>> connections;  // parked ones live here

  mutable std::mutex state_mutex;
  std::condition_variable state_changed;
  std::size_t in_flight = 0;
  int signal = -1;  // -1: none yet; 0: request_stop()

  void accept();
  void wait_signal();
  void answered() {
    std::lock_guard lock(state_mutex);
    --in_flight;
    state_changed.notify_all();
  }
  void forget(const Connection* c) {
    std::shared_ptr<Connection> keep;  // destroyed after the lock is released
    std::lock_guard lock(connections_mutex);
    if (auto it = connections.find(c); it != connections.end()) {
      keep = std::move(it->second);
      connections.erase(it);
    }
  }
};

struct Responder::State {
  std::shared_ptr<Gate> gate;
  std::weak_ptr<Connection> connection;
  detail::ServerImpl* server;  // valid while the gate is open
  std::atomic<bool> sent{false};

  void deliver(HttpResponse response);
  ~State() {
    if (!sent.load()) deliver(json_error(500, "the server dropped this request without an answer"));
  }
};

namespace {

using Parser = http::request_parser<http::string_body>;

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(detail::ServerImpl& server, tcp::socket socket)
      : server_(server), socket_(std::move(socket)), timer_(socket_.get_executor()) {}

  void start() {
    asio::dispatch(socket_.get_executor(), [self = shared_from_this()] { self->read_next(); });
  }

  // On the strand: the handler's answer to the parked request.
  void write_answer(HttpResponse response) {
    if (phase_ != Phase::kParked) {  // closed meanwhile (stop): nobody to write to
      server_.answered();
      return;
    }
    write(std::move(response), keep_alive_, /*answers_parked=*/true);
  }

  [[nodiscard]] auto executor() { return socket_.get_executor(); }

 private:
  enum class Phase { kIdle, kReading, kParked, kWriting, kClosed };

  void arm(std::chrono::milliseconds timeout) {
    const std::uint64_t generation = ++timer_generation_;
    timer_.expires_after(timeout);
    timer_.async_wait([self = shared_from_this(), generation](beast::error_code ec) {
      if (!ec && generation == self->timer_generation_) self->on_timeout();
    });
  }
  void disarm() {
    ++timer_generation_;
    timer_.cancel();
  }

  void on_timeout() {
    switch (phase_) {
      case Phase::kIdle: close(); break;  // keep-alive connection unused for idle_timeout
      case Phase::kReading: {             // a request started and not finished in time
        beast::error_code ignored;
        socket_.cancel(ignored);  // the pending read completes with operation_aborted and sees kWriting
        write(json_error(408, "request not complete within " + std::to_string(server_.options.request_timeout.count()) +
                                  " ms (request_timeout)"),
              false, false);
        break;
      }
      case Phase::kWriting: close(); break;  // the client does not read its answer
      case Phase::kParked:
      case Phase::kClosed: break;
    }
  }

  void read_next() {
    parser_.emplace();
    parser_->body_limit(server_.options.max_body_bytes);
    parser_->header_limit(static_cast<std::uint32_t>(std::min<std::size_t>(server_.options.max_header_bytes, UINT32_MAX)));
    continue_sent_ = false;
    phase_ = Phase::kIdle;
    if (buffer_.size() > 0) {  // a pipelined request's bytes are already here
      phase_ = Phase::kReading;
      arm(server_.options.request_timeout);
    } else {
      arm(server_.options.idle_timeout);
    }
    read_some();
  }

  void read_some() {
    http::async_read_some(socket_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (phase_ != Phase::kIdle && phase_ != Phase::kReading) return;  // timed out or closed meanwhile
    if (ec) {
      if (ec == http::error::body_limit) {
        return write(json_error(413, "request body larger than the limit of " +
                                         std::to_string(server_.options.max_body_bytes) + " bytes (--max-body-bytes)"),
                     false, false);
      }
      if (ec == http::error::header_limit) {
        return write(json_error(431, "request header larger than the limit of " +
                                         std::to_string(server_.options.max_header_bytes) + " bytes"),
                     false, false);
      }
      if (ec == http::error::end_of_stream || ec == http::error::partial_message || ec == asio::error::eof ||
          ec == asio::error::connection_reset || ec == asio::error::operation_aborted || !parser_->got_some()) {
        return close();  // the client went away: nobody to answer
      }
      return write(json_error(400, "malformed HTTP request: " + ec.message()), false, false);
    }
    if (phase_ == Phase::kIdle && parser_->got_some()) {
      phase_ = Phase::kReading;
      arm(server_.options.request_timeout);
    }
    if (!parser_->is_done()) {
      if (parser_->is_header_done() && !continue_sent_) {
        continue_sent_ = true;
        if (beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
          static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
          asio::async_write(socket_, asio::buffer(kContinue.data(), kContinue.size()),
                            [self = shared_from_this()](beast::error_code wec, std::size_t) {
                              if (self->phase_ != Phase::kReading) return;
                              if (wec) return self->close();
                              self->read_some();
                            });
          return;
        }
      }
      return read_some();
    }
    dispatch_request();
  }

  void dispatch_request() {
    disarm();
    phase_ = Phase::kParked;
    http::request<http::string_body> message = parser_->release();
    keep_alive_ = message.keep_alive();
    HttpRequest request;
    request.method = std::string(message.method_string());
    request.target = std::string(message.target());
    request.headers.reserve(8);
    for (const auto& field : message) {
      std::string name(field.name_string());
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      request.headers.emplace_back(std::move(name), std::string(field.value()));
    }
    request.body = std::move(message.body());
    request.received = std::chrono::steady_clock::now();
    {
      std::lock_guard lock(server_.state_mutex);
      ++server_.in_flight;
    }
    auto state = std::make_shared<Responder::State>();
    state->gate = server_.gate;
    state->connection = weak_from_this();
    state->server = &server_;
    Responder respond(std::move(state));
    try {
      server_.handler(std::move(request), respond);
    } catch (const std::exception& e) {
      respond.send(json_error(500, std::string("internal error: ") + e.what()));
    }
  }

  void write(HttpResponse answer, bool keep_alive, bool answers_parked) {
    if (!answers_parked && server_.options.on_transport_error) {
      try {
        server_.options.on_transport_error(answer);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "serve: transport error hook: %s\n", e.what());
      }
    }
    auto response = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(answer.status), 11);
    response->set(http::field::server, "hotpath");
    response->set(http::field::content_type, answer.content_type);
    for (auto& [name, value] : answer.headers) response->set(name, value);
    response->body() = std::move(answer.body);
    response->keep_alive(keep_alive && !server_.draining.load());
    response->prepare_payload();
    phase_ = Phase::kWriting;
    arm(server_.options.write_timeout);
    http::async_write(socket_, *response,
                      [self = shared_from_this(), response, answers_parked](beast::error_code ec, std::size_t) {
                        if (answers_parked) self->server_.answered();
                        if (self->phase_ != Phase::kWriting) return;
                        if (ec || !response->keep_alive()) return self->close();
                        self->read_next();
                      });
  }

  void close() {
    if (phase_ == Phase::kClosed) return;
    phase_ = Phase::kClosed;
    disarm();
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    socket_.close(ignored);
    server_.forget(this);
  }

  detail::ServerImpl& server_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  std::uint64_t timer_generation_ = 0;
  beast::flat_buffer buffer_;
  std::optional<Parser> parser_;
  Phase phase_ = Phase::kIdle;
  bool keep_alive_ = true;
  bool continue_sent_ = false;
};

}  // namespace

void Responder::State::deliver(HttpResponse response) {
  std::lock_guard lock(gate->mutex);  // declared before `c`: the connection is released while the gate is held
  if (!gate->open) return;
  std::shared_ptr<Connection> c = connection.lock();
  if (!c) {
    server->answered();
    return;
  }
  asio::post(c->executor(), [c, response = std::move(response)]() mutable { c->write_answer(std::move(response)); });
}

Responder::Responder(std::shared_ptr<State> state) : state_(std::move(state)) {}

void Responder::send(HttpResponse response) const {
  if (state_->sent.exchange(true)) return;
  state_->deliver(std::move(response));
}

void detail::ServerImpl::accept() {
  acceptor.async_accept(asio::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;  // draining or stopping
    if (!ec) {
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      auto connection = std::make_shared<Connection>(*this, std::move(socket));
      {
        std::lock_guard lock(connections_mutex);
        connections.emplace(connection.get(), connection);
      }
      connection->start();
    } else {  // out of file descriptors and the like: say so, keep the server up, retry shortly (no busy loop)
      std::fprintf(stderr, "serve: accept: %s\n", ec.message().c_str());
      auto retry = std::make_shared<asio::steady_timer>(acceptor.get_executor(), std::chrono::milliseconds(50));
      retry->async_wait([this, retry](beast::error_code) { accept(); });
      return;
    }
    accept();
  });
}

// Re-armed after the first signal: a second SIGTERM/SIGINT during the drain ends the process at once.
void detail::ServerImpl::wait_signal() {
  signals->async_wait([this](beast::error_code ec, int number) {
    if (ec) return;
    {
      std::lock_guard lock(state_mutex);
      if (signal > 0) {
        std::fprintf(stderr, "serve: second signal %d while draining: exiting now\n", number);
        std::_Exit(128 + number);
      }
      signal = number;
      state_changed.notify_all();
    }
    wait_signal();
  });
}

HttpServer::HttpServer(HttpServerOptions options, HttpHandler handler) : impl_(std::make_shared<detail::ServerImpl>()) {
  HOTPATH_CHECK(options.io_threads >= 1 && options.io_threads <= 64, "serve: --io-threads ", options.io_threads,
                " out of range (1..64)");
  HOTPATH_CHECK(options.port >= 0 && options.port <= 65535, "serve: --port ", options.port, " out of range (0..65535)");
  HOTPATH_CHECK(options.max_body_bytes > 0, "serve: --max-body-bytes must be positive");
  HOTPATH_CHECK(options.request_timeout.count() > 0 && options.idle_timeout.count() > 0 && options.write_timeout.count() > 0,
                "serve: timeouts must be positive");
  impl_->options = std::move(options);
  impl_->handler = std::move(handler);
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::start() {
  detail::ServerImpl& s = *impl_;
  beast::error_code ec;
  asio::ip::address address = asio::ip::make_address(s.options.host, ec);
  if (ec) {
    tcp::resolver resolver(s.ioc);
    const auto results = resolver.resolve(s.options.host, std::to_string(s.options.port), ec);
    HOTPATH_CHECK(!ec && !results.empty(), "serve: --host ", s.options.host, ": cannot resolve (", ec.message(), ")");
    address = results.begin()->endpoint().address();
  }
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(s.options.port));
  const auto fail = [&](const char* step) {
    HOTPATH_CHECK(!ec, "serve: cannot listen on ", s.options.host, ":", s.options.port, " (", step, ": ", ec.message(), ")");
  };
  s.acceptor.open(endpoint.protocol(), ec);
  fail("open");
  s.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  fail("SO_REUSEADDR");
  s.acceptor.bind(endpoint, ec);
  fail("bind");
  s.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  fail("listen");
  s.bound_port = s.acceptor.local_endpoint().port();

  s.signals.emplace(s.ioc, SIGTERM, SIGINT);
  s.wait_signal();

  s.work.emplace(s.ioc.get_executor());
  s.accept();
  for (int i = 0; i < s.options.io_threads; ++i) {
    s.threads.emplace_back([&s] {
      for (;;) {
        try {
          s.ioc.run();
          return;
        } catch (const std::exception& e) {  // a handler threw: say so, keep serving
          std::fprintf(stderr, "serve: I/O thread: %s\n", e.what());
        }
      }
    });
  }
}

int HttpServer::port() const { return impl_->bound_port; }

int HttpServer::wait_for_signal() {
  std::unique_lock lock(impl_->state_mutex);
  impl_->state_changed.wait(lock, [&] { return impl_->signal >= 0; });
  return impl_->signal;
}

void HttpServer::request_stop() {
  std::lock_guard lock(impl_->state_mutex);
  if (impl_->signal < 0) impl_->signal = 0;
  impl_->state_changed.notify_all();
}

void HttpServer::begin_drain() {
  detail::ServerImpl& s = *impl_;
  s.draining = true;
  std::promise<void> closed;
  auto done = closed.get_future();
  asio::post(s.acceptor.get_executor(), [&s, &closed] {
    beast::error_code ignored;
    s.acceptor.close(ignored);
    closed.set_value();
  });
  if (!s.threads.empty()) done.wait();
}

bool HttpServer::draining() const { return impl_->draining.load(); }

std::size_t HttpServer::in_flight() const {
  std::lock_guard lock(impl_->state_mutex);
  return impl_->in_flight;
}

bool HttpServer::wait_answered(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(impl_->state_mutex);
  return impl_->state_changed.wait_until(lock, deadline, [&] { return impl_->in_flight == 0; });
}

void HttpServer::stop() {
  detail::ServerImpl& s = *impl_;
  if (s.stopped) return;
  s.stopped = true;
  {
    std::lock_guard lock(s.gate->mutex);
    s.gate->open = false;
  }
  s.work.reset();
  s.ioc.stop();
  for (std::thread& t : s.threads) t.join();
  s.threads.clear();
  std::unordered_map<const Connection*, std::shared_ptr<Connection>> connections;
  {
    std::lock_guard lock(s.connections_mutex);
    connections.swap(s.connections);
  }
  connections.clear();  // sockets close here, while the io_context is alive
}

}  // namespace hotpath::serve
