// hotpath/text/lines.h — a text file's lines, viewed in place (the line-per-text inputs of `hotpath
// tokenize`, `hotpath embed` and the text benchmarks).
//
//   const std::string text = hotpath::read_file("corpus.txt");
//   for (std::string_view line : hotpath::text::split_lines(text)) ...;
#pragma once

#include <string_view>
#include <vector>

namespace hotpath::text {

// The lines of `text` without their '\n' or "\r\n", viewing into `text`; a final line without '\n'
// counts, an empty text has no lines.
std::vector<std::string_view> split_lines(std::string_view text);

}  // namespace hotpath::text
