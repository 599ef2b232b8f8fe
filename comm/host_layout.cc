#include "comm/host_layout.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace nereid {
namespace {

std::string FirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return std::string(absl::StripAsciiWhitespace(line));
}

std::string DeviceAndInode(const char* path) {
  struct stat st;
  if (::stat(path, &st) != 0) return "none";
  return absl::StrCat(st.st_dev, ":", st.st_ino);
}

}  // namespace

std::string HostKey(const EnvGetter& env) {
  if (env) {
    if (std::optional<std::string> id = env("NEREID_HOST_ID"); id.has_value() && !id->empty()) {
      return absl::StrCat("id ", *id);
    }
  }
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  // The user too: segments are created owner-only (0600).
  return absl::StrCat(name, " boot ", FirstLine("/proc/sys/kernel/random/boot_id"), " shm ",
                      DeviceAndInode("/dev/shm"), " net ", DeviceAndInode("/proc/self/ns/net"), " uid ",
                      ::geteuid());
}

HostLayout HostLayout::FromKeys(const std::vector<std::string>& key_of_rank) {
  HostLayout layout;
  std::map<std::string, int> host_of_key;
  for (size_t rank = 0; rank < key_of_rank.size(); ++rank) {
    auto [it, added] = host_of_key.emplace(key_of_rank[rank], static_cast<int>(layout.hosts.size()));
    if (added) layout.hosts.emplace_back();
    layout.host_of.push_back(it->second);
    layout.local_index.push_back(static_cast<int>(layout.hosts[it->second].size()));
    layout.hosts[it->second].push_back(static_cast<int>(rank));
  }
  return layout;
}

std::vector<int> HostLayout::Leaders() const {
  std::vector<int> leaders;
  for (const std::vector<int>& ranks : hosts) leaders.push_back(ranks.front());
  return leaders;
}

std::string HostLayout::Describe() const {
  std::vector<std::string> parts;
  for (const std::vector<int>& ranks : hosts) parts.push_back(absl::StrJoin(ranks, ","));
  return absl::StrCat(hosts.size(), hosts.size() == 1 ? " host: " : " hosts: ", absl::StrJoin(parts, " | "));
}

}  // namespace nereid
