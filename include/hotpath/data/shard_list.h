// hotpath/data/shard_list.h — turn shard arguments into a list of files.
//
// Each argument may hold brace ranges/lists (WebDataset/braceexpand style) and glob characters:
//   resolve_shards({"data/train-{000000..000099}.tar"})  // 100 paths, in order
//   resolve_shards({"data/train-*.tar"})                 // glob, sorted
// Zero-padded ranges keep their width; lists ("{a,b}") and nested braces expand. A brace
// pattern naming a file that does not exist, or a glob matching nothing, is an error.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hotpath::data {

std::vector<std::string> expand_braces(std::string_view pattern);
std::vector<std::string> resolve_shards(const std::vector<std::string>& patterns);

}  // namespace hotpath::data
