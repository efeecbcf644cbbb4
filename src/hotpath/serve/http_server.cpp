// The HTTP/1.1 transport on Boost.Beast/Asio (the only TU that sees Beast: it compiles slowly).
//
// One Connection per socket, on its own strand. A connection is always in one phase: waiting for a request
// (idle timeout), reading one (request timeout from its first byte, header included), parked (the handler holds
// a Responder; no timer, no read: the batcher may take its time), writing (write timeout), or lingering after an
// answer that closes it (its unread request bytes are read and dropped, bounded in bytes and time, so the client
// sees the answer rather than a reset). Timeouts are our own timer rather than beast::tcp_stream's, because
// tcp_stream closes the socket on expiry and a slow client must still get its 408.
//
// Memory: each connection reserves its request's bytes from one server-wide budget as they arrive, and the whole
// Content-Length as soon as the header is read (before any of the body), and gives them back when the answer is
// written.
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
#include <array>
#include <atomic>
#include <cctype>
#include <charconv>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
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

// Connections being refused (503 written, request drained) beyond --max-connections; past this many, one more
// is closed unanswered: answering must not cost unbounded descriptors either.
constexpr std::size_t kMaxRefusing = 64;
constexpr std::size_t kReadSize = 16u << 10;

}  // namespace

struct detail::ServerImpl {
  HttpServerOptions options;
  HttpHandler handler;
  // Before ioc: a Connection's destructor gives its counts back, and ioc's destructor may run the last ones.
  std::atomic<std::size_t> admitted{0};  // open connections within max_connections
  std::atomic<std::size_t> refusing{0};  // connections over it, being answered 503
  std::atomic<std::size_t> buffered{0};  // request bytes reserved by all connections
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

  mutable std::mutex refused_mutex;
  std::map<std::string, std::uint64_t> refused;  // reason → count (TransportStats::refused)

  void count_refused(const std::string& reason) {
    std::lock_guard lock(refused_mutex);
    ++refused[reason];
  }
  // Takes `bytes` more from the buffered-byte budget; false (nothing taken) when that would pass it.
  bool reserve(std::size_t bytes) {
    std::size_t now = buffered.load();
    do {
      if (bytes > options.max_buffered_bytes - std::min(now, options.max_buffered_bytes)) return false;
    } while (!buffered.compare_exchange_weak(now, now + bytes));
    return true;
  }
  void release(std::size_t bytes) { buffered.fetch_sub(bytes); }

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
  // `admitted`: within --max-connections (counted in server.admitted); otherwise the connection is answered 503
  // at once and closed (counted in server.refusing). The caller has counted it already.
  Connection(detail::ServerImpl& server, tcp::socket socket, bool admitted)
      : server_(server), socket_(std::move(socket)), timer_(socket_.get_executor()), admitted_(admitted) {}
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() { give_back(); }

  void start() {
    asio::dispatch(socket_.get_executor(), [self = shared_from_this()] {
      if (self->admitted_) return self->read_next();
      HttpResponse busy = json_error(503, "the server is at its limit of " +
                                              std::to_string(self->server_.options.max_connections) +
                                              " open connections (--max-connections): retry later");
      busy.headers.emplace_back("Retry-After", "1");
      self->refuse(std::move(busy), "connections");
    });
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
  enum class Phase { kIdle, kReading, kParked, kWriting, kLingering, kClosed };

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
      case Phase::kReading: {             // a request (or its header) started and not finished in time
        beast::error_code ignored;
        socket_.cancel(ignored);  // the pending read completes with operation_aborted and sees kWriting
        const bool header = parser_->is_header_done();
        refuse(json_error(408, std::string(header ? "request" : "request header") + " not complete within " +
                                   std::to_string(server_.options.request_timeout.count()) +
                                   " ms of its first byte (--request-timeout-ms)"),
               "request_timeout");
        break;
      }
      case Phase::kWriting:    // the client does not read its answer
      case Phase::kLingering:  // nor stops sending what we drop
        close();
        break;
      case Phase::kParked:
      case Phase::kClosed: break;
    }
  }

  void read_next() {
    release_request();
    parser_.emplace();
    parser_->body_limit(server_.options.max_body_bytes);
    parser_->header_limit(static_cast<std::uint32_t>(std::min<std::size_t>(server_.options.max_header_bytes, UINT32_MAX)));
    header_bytes_ = 0;
    continue_sent_ = false;
    if (buffer_.size() > 0) {  // a pipelined request's bytes are already here
      phase_ = Phase::kReading;
      arm(server_.options.request_timeout);
      if (account()) read_some();
      return;
    }
    phase_ = Phase::kIdle;
    arm(server_.options.idle_timeout);
    // The first bytes are read here rather than by the HTTP parser, which reports nothing until a whole header has
    // arrived: a header trickled byte by byte must run on the request timeout, not the idle one.
    socket_.async_read_some(buffer_.prepare(kReadSize),
                            [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                              if (self->phase_ != Phase::kIdle) return;  // timed out or closed meanwhile
                              if (ec) return self->close();  // the client went away (or closed its idle connection)
                              self->buffer_.commit(n);
                              self->phase_ = Phase::kReading;
                              self->arm(self->server_.options.request_timeout);
                              if (self->account()) self->read_some();
                            });
  }

  void read_some() {
    http::async_read_some(socket_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  // Reserves what this request holds now from the server's budget: unparsed bytes, and once the header is read,
  // the header and the whole Content-Length (or the chunked body so far). False: refused with 503 (done here).
  bool account() {
    std::size_t held = buffer_.size();
    if (parser_->is_header_done()) {
      if (header_bytes_ == 0) {
        const auto& message = parser_->get();
        header_bytes_ = message.target().size() + 16;
        for (const auto& field : message) header_bytes_ += field.name_string().size() + field.value().size() + 4;
      }
      const std::size_t declared = static_cast<std::size_t>(parser_->content_length().value_or(0));
      held += header_bytes_ + std::max(parser_->get().body().size(), declared);
    }
    if (held <= reserved_) return true;
    if (!server_.reserve(held - reserved_)) {
      const std::size_t in_use = server_.buffered.load();
      HttpResponse busy = json_error(503, "the server holds " + std::to_string(in_use) +
                                              " bytes of requests, and this one's " + std::to_string(held) +
                                              " would pass its limit of " +
                                              std::to_string(server_.options.max_buffered_bytes) +
                                              " (--max-buffered-bytes): retry later");
      busy.headers.emplace_back("Retry-After", "1");
      refuse(std::move(busy), "buffered_bytes");
      return false;
    }
    reserved_ = held;
    return true;
  }
  void release_request() {
    server_.release(reserved_);
    reserved_ = 0;
  }

  void on_read(beast::error_code ec) {
    if (phase_ != Phase::kReading) return;  // timed out or closed meanwhile
    if (ec) {
      if (ec == http::error::body_limit) {
        return refuse(json_error(413, "request body of " + std::to_string(declared_length().value_or(0)) +
                                          " bytes larger than the limit of " +
                                          std::to_string(server_.options.max_body_bytes) + " bytes (--max-body-bytes)"),
                      "body_too_large");
      }
      if (ec == http::error::header_limit) {
        return refuse(json_error(431, "request header larger than the limit of " +
                                          std::to_string(server_.options.max_header_bytes) +
                                          " bytes (--max-header-bytes)"),
                      "header_too_large");
      }
      if (ec == http::error::end_of_stream || ec == http::error::partial_message || ec == asio::error::eof ||
          ec == asio::error::connection_reset || ec == asio::error::operation_aborted) {
        return close();  // the client went away: nobody to answer
      }
      return refuse(json_error(400, "malformed HTTP request: " + ec.message()), "malformed");
    }
    if (!account()) return;
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

  // An answer the transport gives by itself (never reaching the handler): counted under `reason`, reported to
  // on_transport_error, then the connection lingers and closes. What is left of the request is dropped unread:
  // the rest of a declared body (a 413 for 60 MB reads and drops the 60 MB), else up to one request's budget.
  void refuse(HttpResponse answer, const char* reason) {
    server_.count_refused(reason);
    if (server_.options.on_transport_error) {
      try {
        server_.options.on_transport_error(answer);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "serve: transport error hook: %s\n", e.what());
      }
    }
    std::size_t left = server_.options.max_header_bytes + server_.options.max_body_bytes;
    if (const std::optional<std::size_t> declared = declared_length()) {
      const std::size_t got = parser_->get().body().size() + buffer_.size();
      left = std::max(*declared > got ? *declared - got : 0, std::size_t{kReadSize});
    }
    linger_bytes_left_ = left;
    write(std::move(answer), false, false);
  }

  // The request's Content-Length once its fields are read: the parser's, or when it stopped at the header's end
  // (body_limit: the header is then not "done") the field itself.
  [[nodiscard]] std::optional<std::size_t> declared_length() const {
    if (!parser_) return std::nullopt;
    if (parser_->is_header_done()) {
      const auto length = parser_->content_length();
      return length ? std::optional<std::size_t>(static_cast<std::size_t>(*length)) : std::nullopt;
    }
    const auto field = parser_->get().find(http::field::content_length);
    if (field == parser_->get().end()) return std::nullopt;
    const beast::string_view text = field->value();
    std::size_t value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
    return value;
  }

  void write(HttpResponse answer, bool keep_alive, bool answers_parked) {
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
                        self->release_request();
                        if (ec) return self->close();
                        if (!response->keep_alive()) return self->linger();
                        self->read_next();
                      });
  }

  // After an answer that closes the connection: half-close (the client sees the end of the answer), then read
  // and drop what the client still sends, until it closes, linger_bytes_left_ are dropped, or
  // min(request timeout, 10 s) passes. Closing with unread bytes would send a reset, which loses the answer.
  void linger() {
    phase_ = Phase::kLingering;
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    const std::size_t buffered = buffer_.size();
    buffer_.consume(buffered);
    linger_bytes_left_ -= std::min(linger_bytes_left_, buffered);
    buffer_.shrink_to_fit();
    if (linger_bytes_left_ == 0) return close();
    arm(std::min<std::chrono::milliseconds>(server_.options.request_timeout, std::chrono::seconds(10)));
    discard_ = std::make_unique<std::array<char, kReadSize>>();
    discard_more();
  }
  void discard_more() {
    socket_.async_read_some(asio::buffer(*discard_), [self = shared_from_this()](beast::error_code ec, std::size_t n) {
      if (self->phase_ != Phase::kLingering) return;
      self->linger_bytes_left_ -= std::min(self->linger_bytes_left_, n);
      if (ec || self->linger_bytes_left_ == 0) return self->close();
      self->discard_more();
    });
  }

  void close() {
    if (phase_ == Phase::kClosed) return;
    phase_ = Phase::kClosed;
    disarm();
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    give_back();
    server_.forget(this);
  }

  // Returns this connection's reserved bytes and its place under --max-connections (once).
  void give_back() {
    release_request();
    if (counted_) {
      counted_ = false;
      (admitted_ ? server_.admitted : server_.refusing).fetch_sub(1);
    }
  }

  detail::ServerImpl& server_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  std::uint64_t timer_generation_ = 0;
  beast::flat_buffer buffer_;
  std::optional<Parser> parser_;
  Phase phase_ = Phase::kIdle;
  bool admitted_;
  bool counted_ = true;
  bool keep_alive_ = true;
  bool continue_sent_ = false;
  std::size_t reserved_ = 0;      // bytes of the current request taken from server_.buffered
  std::size_t header_bytes_ = 0;  // the current request's header, once read
  std::size_t linger_bytes_left_ = 0;
  std::unique_ptr<std::array<char, kReadSize>> discard_;  // only while lingering
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
      // On the acceptor's strand: the counts only grow here, so check-then-add needs no lock.
      const bool admit = admitted.load() < options.max_connections;
      if (!admit && refusing.load() >= kMaxRefusing) {
        count_refused("connections");
        socket.close(ignored);
        return accept();
      }
      (admit ? admitted : refusing).fetch_add(1);
      socket.set_option(tcp::no_delay(true), ignored);
      auto connection = std::make_shared<Connection>(*this, std::move(socket), admit);
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
  HOTPATH_CHECK(options.max_header_bytes >= 1024, "serve: --max-header-bytes must be at least 1024");
  HOTPATH_CHECK(options.max_connections >= 1, "serve: --max-connections must be positive");
  HOTPATH_CHECK(options.max_buffered_bytes >= options.max_body_bytes + options.max_header_bytes,
                "serve: --max-buffered-bytes ", options.max_buffered_bytes, " is less than one request's budget, "
                "--max-body-bytes + --max-header-bytes = ", options.max_body_bytes + options.max_header_bytes,
                ": a request that size could never be read");
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

TransportStats HttpServer::stats() const {
  const detail::ServerImpl& s = *impl_;
  TransportStats t;
  t.connections = s.admitted.load();
  t.max_connections = s.options.max_connections;
  t.buffered_bytes = s.buffered.load();
  t.max_buffered_bytes = s.options.max_buffered_bytes;
  t.max_request_bytes = s.options.max_header_bytes + s.options.max_body_bytes;
  std::lock_guard lock(s.refused_mutex);
  t.refused = s.refused;
  return t;
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
