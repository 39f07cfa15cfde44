// Opening files beneath a scope: the one door through which every file of a model or tokenizer
// (config.json, safetensors files and shards, the shard index, tokenizer.json, vocab.json,
// merges.txt, tokenizer_config.json, TorchScript files) is opened for a caller.
//
// A Scope is a directory (a tenant's folder of the model root, the whole root for a public
// model, the data directory's uploads) and the words messages use for it. OpenBeneath resolves
// a path inside it:
//  1. openat2(root, path, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) where the kernel has it:
//     the kernel refuses any step out of the root, relative symlinks that stay inside work (the
//     Hugging Face cache links snapshots to ../../blobs/...);
//  2. otherwise (no openat2, or it refused: an absolute symlink, a missing file) the canonical
//     route: every symlink resolved, the result checked against the root, opened with O_NOFOLLOW
//     on the last component, then the open file checked again by device and inode against the
//     path checked, and by /proc/self/fd against the root.
// In a walled scope, a file with more than one hard link is refused too (PATH_NOT_ALLOWED): a
// second name of another folder's file would pass every check above.
// A path that leads out of the scope, or through a dangling symlink, is INVALID_ARGUMENT with
// reason PATH_NOT_ALLOWED, in the same words whether or not its target exists (no oracle for
// paths outside). Messages name files by their path relative to the root (ShownPath), never by
// the server's absolute path. Every read goes through here again, so a file replaced by a link
// after registration is refused when it is read next.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace posbias::files {

struct Scope {
  // Canonical absolute directory every open stays beneath; "" = anywhere (the stand-alone tools,
  // run by their own user on their own files).
  std::string root;
  // How messages name the scope: "the model root's folder lab-b/".
  std::string name = "the model root";

  bool walled() const { return !root.empty(); }
  // A scope for `directory` (made canonical); FAILED_PRECONDITION when it does not exist.
  static absl::StatusOr<Scope> Of(const std::string& directory, std::string name);
};

// An open regular file: its descriptor (closed with this) and its stat.
class OpenFile {
 public:
  OpenFile(int fd, struct stat info) : fd_(fd), info_(info) {}
  OpenFile(OpenFile&& other) noexcept;
  OpenFile& operator=(OpenFile&& other) noexcept;
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;
  ~OpenFile();

  int fd() const { return fd_; }
  uint64_t size() const { return static_cast<uint64_t>(info_.st_size); }
  const struct stat& info() const { return info_; }

 private:
  int fd_ = -1;
  struct stat info_ {};
};

// Opens `path` (absolute beneath the root, or relative to it) read-only, without blocking on a
// FIFO, as a regular file. PATH_NOT_ALLOWED for a path leading out (see above), PATH_NOT_FOUND
// for a missing file inside, INVALID_MODEL_FILE for a directory or device.
absl::StatusOr<OpenFile> OpenBeneath(const Scope& scope, const std::string& path);

// The whole file at `path` when it has at most `max_bytes` (INVALID_MODEL_FILE beyond).
absl::StatusOr<std::string> ReadBeneath(const Scope& scope, const std::string& path, uint64_t max_bytes);

// Whether the directory holds an entry named by `path` (lstat: a symlink counts, whatever its
// target). Callers choose which file to read with it, then OpenBeneath decides whether it may be
// followed, so the choice never depends on a file outside the scope.
bool HasEntry(const std::string& path);
// Whether `path` names a directory beneath the scope (every symlink resolved inside it).
bool IsDirectoryBeneath(const Scope& scope, const std::string& path);

// `path` as messages show it: relative to the root when beneath it, else its last component.
std::string ShownPath(const Scope& scope, const std::string& path);

}  // namespace posbias::files
