#ifndef NEREID_CORE_BUILD_REVISION_H_
#define NEREID_CORE_BUILD_REVISION_H_

// The git revision the binary was built from ("0123abcd4567", with "-dirty"
// for uncommitted changes, or "unknown"), stamped at build time from
// core/workspace_status.sh. Only binaries link it (//core:build_revision),
// so a new commit relinks them and not every library and test.
const char* NereidRevision();

#endif  // NEREID_CORE_BUILD_REVISION_H_
