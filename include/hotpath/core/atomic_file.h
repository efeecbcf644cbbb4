// hotpath/core/atomic_file.h — write a file so that readers (and crashes) see the old or the new
// contents, never a mix: PATH.tmp, fsync, rename over PATH, fsync the directory.
//
//   write_file_atomic("run/state.json", json_text);
//   write_file_atomic("w.safetensors", {prefix, header, data});   // several chunks, one file
//   sync_directory("run/checkpoints");                           // after renaming a directory
//
// On any failure the temp file is removed and PATH is untouched; errors name the file and errno.
// A PATH that exists and is not a regular file (/dev/stdout, /dev/null, a FIFO with a reader) is written
// through instead — renaming over it would replace the device or pipe; a directory is an error.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hotpath {

void write_file_atomic(const std::string& path, const std::vector<std::span<const std::byte>>& chunks);
void write_file_atomic(const std::string& path, std::string_view text);
// fsync of a directory (makes renames inside it durable). Best effort: failures are ignored.
void sync_directory(const std::string& dir);

}  // namespace hotpath
