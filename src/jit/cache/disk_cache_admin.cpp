// disk_cache_admin.cpp - the operations behind `tsattn cache info|verify|prune|clear`.
//
// They walk the tree rather than keep an index: the directory structure is the only state, so
// nothing can disagree with it after a crash or a concurrent publish. Deletes are stat-guarded
// (posix_files.hpp) wherever another process may have just written or used the file.
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

#include "jit/cache/disk_cache.hpp"
#include "jit/cache/entry_format.hpp"
#include "jit/cache/posix_files.hpp"

namespace tsattn::jit {
namespace {

struct EntryFile {
  std::string path;
  std::string arch;
  std::string fanout;  // the <first 2 hex> directory it lies in
  std::string stem;    // file name without ".tsk"
  struct stat st;
};

// Every regular *.tsk file of this library's format under root:
// <root>/v<N>/<arch>/<fanout>/<name>.tsk. Misnamed ones are included for verify to report.
std::vector<EntryFile> scan_entries(const std::string& root) {
  std::vector<EntryFile> entries;
  const std::string version_dir = fmt::format("{}/v{}", root, kEntryFormatVersion);
  for (const std::string& arch : list_subdirectories(version_dir)) {
    const std::string arch_dir = version_dir + "/" + arch;
    for (const std::string& fanout : list_subdirectories(arch_dir)) {
      const std::string dir = arch_dir + "/" + fanout;
      for (DirEntry& file : list_regular_files(dir)) {
        if (file.name.size() <= 4 || !file.name.ends_with(".tsk")) continue;
        entries.push_back({dir + "/" + file.name, arch, fanout, file.name.substr(0, file.name.size() - 4), file.st});
      }
    }
  }
  // Directory order is arbitrary; reports and tests want a stable one.
  std::sort(entries.begin(), entries.end(), [](const EntryFile& a, const EntryFile& b) { return a.path < b.path; });
  return entries;
}

std::optional<Digest> digest_from_hex(std::string_view hex) {
  Digest digest{};
  if (hex.size() != 2 * digest.size()) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;  // upper case is not what entry_path writes
  };
  for (size_t i = 0; i < digest.size(); ++i) {
    const int high = nibble(hex[2 * i]), low = nibble(hex[2 * i + 1]);
    if (high < 0 || low < 0) return std::nullopt;
    digest[i] = static_cast<uint8_t>(high * 16 + low);
  }
  return digest;
}

// Header and metadata only (the payload is not read): enough for `cache info`.
std::string read_name(const std::string& path, std::string* problem) {
  int err = 0;
  UniqueFd fd = open_for_reading(path, &err);
  std::vector<uint8_t> bytes;
  if (!fd || !read_exactly(fd.get(), 0, kEntryHeaderSize, bytes, &err)) {
    *problem = fmt::format("cannot read the header: {}", errno_text(err));
    return {};
  }
  const std::optional<EntryHeader> header = parse_entry_header(bytes, problem);
  if (!header) return {};
  if (!read_exactly(fd.get(), kEntryHeaderSize, header->metadata_size, bytes, &err)) {
    *problem = fmt::format("cannot read the metadata: {}", errno_text(err));
    return {};
  }
  const std::optional<nlohmann::json> metadata = parse_entry_metadata(*header, bytes, problem);
  return metadata ? (*metadata)["name"].get<std::string>() : std::string();
}

// The reason the entry at `file` is bad, or empty when it parses under the key its name states.
std::string entry_problem(const EntryFile& file) {
  const std::optional<Digest> key = digest_from_hex(file.stem);
  if (!key) return "file name is not <64 lowercase hex digits>.tsk";
  if (file.fanout != file.stem.substr(0, 2))
    return fmt::format("filed under {}/, lookups look in {}/", file.fanout, file.stem.substr(0, 2));
  int err = 0;
  UniqueFd fd = open_for_reading(file.path, &err);
  struct stat st;
  if (!fd || ::fstat(fd.get(), &st) != 0) return fmt::format("cannot open: {}", errno_text(err));
  std::vector<uint8_t> bytes;
  if (static_cast<uint64_t>(st.st_size) > kEntryHeaderSize + kMaxMetadataSize + kMaxPayloadSize)
    return fmt::format("{} bytes is more than any entry can hold", st.st_size);
  if (!read_exactly(fd.get(), 0, static_cast<size_t>(st.st_size), bytes, &err))
    return fmt::format("read failed: {}", errno_text(err));
  std::string why;
  return parse_entry(bytes, *key, &why) ? std::string() : why;
}

std::chrono::system_clock::time_point mtime_of(const struct stat& st) {
  return std::chrono::system_clock::time_point(std::chrono::duration_cast<std::chrono::system_clock::duration>(
      std::chrono::nanoseconds(FileStamp::of(st).mtime_ns)));
}

}  // namespace

std::vector<EntryInfo> DiskCache::list_entries() const {
  std::vector<EntryInfo> infos;
  auto add_layer = [&](const std::string& root, LayerKind layer, size_t index) {
    for (const EntryFile& file : scan_entries(root)) {
      EntryInfo info{layer, index,     file.path,         static_cast<uint64_t>(file.st.st_size),
                     {},    file.arch, mtime_of(file.st), {}};
      info.name = read_name(file.path, &info.problem);
      infos.push_back(std::move(info));
    }
  };
  for (size_t i = 0; i < config_.read_only_roots.size(); ++i)
    add_layer(config_.read_only_roots[i], LayerKind::read_only, i);
  if (writable_readable()) add_layer(*config_.writable_root, LayerKind::writable, 0);
  return infos;
}

VerifyReport DiskCache::verify(bool remove_bad) {
  VerifyReport report;
  if (!writable_readable()) return report;
  for (const EntryFile& file : scan_entries(*config_.writable_root)) {
    ++report.checked;
    std::string problem = entry_problem(file);
    if (problem.empty()) continue;
    if (remove_bad && remove_if_unchanged(file.path, FileStamp::of(file.st))) ++report.removed;
    report.bad.push_back({file.path, std::move(problem)});
  }
  return report;
}

PruneReport DiskCache::prune(uint64_t max_bytes) {
  PruneReport report;
  if (!writable_readable()) return report;
  remove_files_older_than(*config_.writable_root + "/tmp", kStaleTempSeconds);
  std::vector<EntryFile> entries = scan_entries(*config_.writable_root);
  // Oldest use first; the path breaks ties so equal stamps evict in a reproducible order.
  std::sort(entries.begin(), entries.end(), [](const EntryFile& a, const EntryFile& b) {
    return std::tuple(FileStamp::of(a.st).mtime_ns, a.path) < std::tuple(FileStamp::of(b.st).mtime_ns, b.path);
  });
  report.entries_before = entries.size();
  for (const EntryFile& file : entries) report.bytes_before += static_cast<uint64_t>(file.st.st_size);
  uint64_t total = report.bytes_before;
  for (const EntryFile& file : entries) {
    if (total <= max_bytes) break;
    // A file that changed since the scan was just used or republished: it stays.
    if (remove_if_unchanged(file.path, FileStamp::of(file.st))) {
      total -= static_cast<uint64_t>(file.st.st_size);
      ++report.removed;
    }
  }
  report.bytes_after = total;
  return report;
}

uint64_t DiskCache::clear() {
  if (!writable_readable()) return 0;
  uint64_t removed = 0;
  for (const EntryFile& file : scan_entries(*config_.writable_root)) {
    if (::unlink(file.path.c_str()) == 0) ++removed;
    // Empty fan-out and arch directories go too (rmdir refuses non-empty ones, e.g. when a
    // publish just landed); the next publish recreates what it needs.
    const std::string fanout_dir = file.path.substr(0, file.path.rfind('/'));
    if (::rmdir(fanout_dir.c_str()) == 0) ::rmdir(fanout_dir.substr(0, fanout_dir.rfind('/')).c_str());
  }
  return removed;
}

}  // namespace tsattn::jit
