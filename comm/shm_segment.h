#ifndef NEREID_COMM_SHM_SEGMENT_H_
#define NEREID_COMM_SHM_SEGMENT_H_

// A POSIX shared-memory segment (/dev/shm) that the ranks of one host map at
// once: one rank creates it under a fresh name and tells the others the name,
// they open it, and once every rank has it mapped the creator unlinks the
// name, so nothing is left in /dev/shm however the run ends later. Until
// then the creator holds an flock on it; a name whose creator died in that
// window (killed at start-up) is found by RemoveAbandoned, which takes the
// lock (flock, not pids: pids mean nothing across PID namespaces sharing
// /dev/shm) and removes it.
//
// Create reserves the pages (posix_fallocate): a full /dev/shm is an error
// naming the segment and the size here, not a SIGBUS in the middle of a run.
//
// Within one process a segment is mapped once: opening a name this process
// already maps shares that mapping (ranks run as threads in tests), so every
// thread sees one address for each byte, as ThreadSanitizer needs to follow
// the synchronisation through it.

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace nereid {

class ShmSegment {
 public:
  // `name`: "/nereid-...", at most 255 characters, one slash (the first).
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Create(const std::string& name, size_t bytes);
  // Fails unless the segment exists and holds exactly `bytes`.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Open(const std::string& name, size_t bytes);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Removes the name (the mapping stays) and drops the creator's lock;
  // idempotent.
  void Unlink();

  // Removes the names under /dev/shm starting with `prefix` whose creator is
  // gone (no lock held, untouched for 10 s); returns how many.
  static int RemoveAbandoned(const std::string& prefix);

  void* base() const;
  size_t size() const;
  const std::string& name() const { return name_; }

  struct Mapping;  // shm_segment.cc

 private:
  ShmSegment(std::string name, std::shared_ptr<Mapping> mapping, int lock_fd)
      : name_(std::move(name)), mapping_(std::move(mapping)), owner_(lock_fd >= 0), lock_fd_(lock_fd) {}

  std::string name_;
  std::shared_ptr<Mapping> mapping_;
  bool owner_;    // the creator unlinks on destruction if nobody did
  int lock_fd_;   // the creator's: holds the flock until the name is gone
  bool unlinked_ = false;
};

}  // namespace nereid

#endif  // NEREID_COMM_SHM_SEGMENT_H_
