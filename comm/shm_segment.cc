#include "comm/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"

namespace nereid {

struct ShmSegment::Mapping {
  void* base;
  size_t size;
  ~Mapping() { ::munmap(base, size); }
};

namespace {

// The segments this process maps, by name.
std::mutex& MappedMutex() {
  static std::mutex mu;
  return mu;
}
std::map<std::string, std::weak_ptr<ShmSegment::Mapping>>& Mapped() {
  static auto* mapped = new std::map<std::string, std::weak_ptr<ShmSegment::Mapping>>();
  return *mapped;
}

std::string Errno(int error) { return std::strerror(error); }

absl::Status CheckName(const std::string& name) {
  if (name.size() < 2 || name.size() > 255 || name[0] != '/' || name.find('/', 1) != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("shared-memory segment name '", name,
                                                   "' must be '/' and 1 to 254 characters without '/'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<void*> Map(int fd, size_t bytes, const std::string& name) {
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("mapping shared-memory segment ", name, " (", bytes,
                                                     " bytes): ", Errno(errno)));
  }
  return base;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(const std::string& name, size_t bytes) {
  if (absl::Status s = CheckName(name); !s.ok()) return s;
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("creating shared-memory segment ", name, ": ", Errno(errno)));
  }
  // Held until the name is removed: RemoveAbandoned leaves it alone meanwhile.
  ::flock(fd, LOCK_EX);
  auto fail = [&](absl::Status status) {
    ::shm_unlink(name.c_str());
    ::close(fd);
    return status;
  };
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    return fail(absl::ResourceExhaustedError(
        absl::StrCat("sizing shared-memory segment ", name, " to ", bytes, " bytes: ", Errno(errno))));
  }
  // Reserve the pages now: touching a page /dev/shm has no room for is a SIGBUS.
  if (const int error = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)); error != 0) {
    return fail(absl::ResourceExhaustedError(absl::StrCat("reserving ", bytes, " bytes of /dev/shm for segment ",
                                                          name, ": ", Errno(error),
                                                          " (free space in /dev/shm, or use --transport gloo)")));
  }
  absl::StatusOr<void*> base = Map(fd, bytes, name);
  if (!base.ok()) return fail(base.status());
  auto mapping = std::shared_ptr<Mapping>(new Mapping{*base, bytes});
  {
    std::lock_guard<std::mutex> lock(MappedMutex());
    Mapped()[name] = mapping;
  }
  return std::unique_ptr<ShmSegment>(new ShmSegment(name, std::move(mapping), /*lock_fd=*/fd));
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Open(const std::string& name, size_t bytes) {
  if (absl::Status s = CheckName(name); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(MappedMutex());
  if (auto it = Mapped().find(name); it != Mapped().end()) {
    if (std::shared_ptr<Mapping> mapping = it->second.lock()) {
      if (mapping->size != bytes) {
        return absl::FailedPreconditionError(absl::StrCat("shared-memory segment ", name, " holds ", mapping->size,
                                                          " bytes, expected ", bytes));
      }
      return std::unique_ptr<ShmSegment>(new ShmSegment(name, std::move(mapping), /*lock_fd=*/-1));
    }
  }
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("opening shared-memory segment ", name, ": ", Errno(errno),
                                               " (the shm transport needs every rank on one host)"));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("reading shared-memory segment ", name, ": ", Errno(error)));
  }
  if (static_cast<size_t>(st.st_size) != bytes) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat("shared-memory segment ", name, " holds ",
                                                      static_cast<int64_t>(st.st_size), " bytes, expected ", bytes));
  }
  absl::StatusOr<void*> base = Map(fd, bytes, name);
  ::close(fd);
  if (!base.ok()) return base.status();
  auto mapping = std::shared_ptr<Mapping>(new Mapping{*base, bytes});
  Mapped()[name] = mapping;
  return std::unique_ptr<ShmSegment>(new ShmSegment(name, std::move(mapping), /*lock_fd=*/-1));
}

int ShmSegment::RemoveAbandoned(const std::string& prefix) {
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return 0;
  int removed = 0;
  const time_t now = ::time(nullptr);
  while (const struct dirent* entry = ::readdir(dir)) {
    const std::string file = entry->d_name;
    if (file.rfind(prefix, 0) != 0) continue;
    const std::string name = "/" + file;
    const int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
    if (fd < 0) continue;
    struct stat st;
    // Untouched for 10 s: not one whose creator is between shm_open and flock.
    const bool settled = ::fstat(fd, &st) == 0 && now - st.st_mtime > 10;
    if (settled && ::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      ::shm_unlink(name.c_str());
      ++removed;
    }
    ::close(fd);
  }
  ::closedir(dir);
  return removed;
}

void* ShmSegment::base() const { return mapping_->base; }
size_t ShmSegment::size() const { return mapping_->size; }

void ShmSegment::Unlink() {
  if (unlinked_) return;
  unlinked_ = true;
  ::shm_unlink(name_.c_str());
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
  lock_fd_ = -1;
  std::lock_guard<std::mutex> lock(MappedMutex());
  Mapped().erase(name_);  // the name is gone for this process too
}

ShmSegment::~ShmSegment() {
  if (owner_) Unlink();
  std::lock_guard<std::mutex> lock(MappedMutex());
  mapping_.reset();  // unmaps if this was the last handle
  if (auto it = Mapped().find(name_); it != Mapped().end() && it->second.expired()) Mapped().erase(it);
}

}  // namespace nereid
