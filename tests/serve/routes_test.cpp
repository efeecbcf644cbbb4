// The routes' pieces that need no model: the /v1 text body parser (binary bodies refused whole) and the one-line
// error message every 4xx/5xx body carries (a c10::Error without its backtrace).
#include "hotpath/serve/routes.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hotpath::serve {
namespace {

std::string refusal(std::string_view body, std::string_view content_type) {
  try {
    (void)body_texts(body, content_type);
  } catch (const ServeError& e) {
    EXPECT_EQ(e.http_status(), 400);
    return e.what();
  }
  return "(accepted)";
}

TEST(BodyTexts, SplitsPlainTextAndJsonLines) {
  EXPECT_EQ(body_texts("a cat\r\n\n  \nthe dog\n", "text/plain"), (std::vector<std::string>{"a cat", "the dog"}));
  EXPECT_EQ(body_texts("\"one\"\n{\"text\": \"two\"}\n", "application/jsonl"),
            (std::vector<std::string>{"one", "two"}));
  EXPECT_EQ(body_texts("caf\xc3\xa9", ""), (std::vector<std::string>{"caf\xc3\xa9"}));
}

TEST(BodyTexts, RefusesABinaryBodyWholeInsteadOfSplittingItIntoTexts) {
  // A JPEG's first bytes, with line feeds inside: once read as 291 "texts".
  std::string jpeg("\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\n\n\x01\x02\n", 17);
  EXPECT_NE(refusal(jpeg, "text/plain").find("body: not UTF-8 text (byte 0xff at offset 0)"), std::string::npos);
  EXPECT_NE(refusal(std::string("ok\ntext\0more", 12), "").find("a NUL byte at offset 7"), std::string::npos);
  EXPECT_NE(refusal("looks like text", "image/jpeg").find("Content-Type image/jpeg is not text"), std::string::npos);
  EXPECT_NE(refusal("x", "application/octet-stream").find("not text"), std::string::npos);
  EXPECT_NE(refusal("{\"text\": 5}", "application/jsonl").find("body line 1"), std::string::npos);
}

TEST(OneLineMessage, DropsATorchBacktraceAndFoldsLines) {
  std::string message;
  try {
    (void)at::empty({0, std::int64_t{1} << 30, std::int64_t{1} << 30, std::int64_t{1} << 30});
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find('\n'), std::string::npos);  // what() carries the backtrace
    message = one_line_message(e);
  }
  EXPECT_FALSE(message.empty());
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_EQ(message.find("frame #"), std::string::npos) << message;
  EXPECT_EQ(message.find("Exception raised from"), std::string::npos) << message;
  EXPECT_EQ(one_line_message(std::runtime_error("first\n  second\r\nthird")), "first; second; third");
  EXPECT_EQ(one_line_message(std::runtime_error(std::string(5000, 'x'))).size(), 1003u);
}

TEST(JsonError, IsOneLineOfJson) {
  const HttpResponse r = json_error(500, "a\nb\r\nc");
  EXPECT_EQ(r.body, R"({"error":"a b  c"})");
  EXPECT_EQ(r.status, 500);
}

}  // namespace
}  // namespace hotpath::serve
