#!/bin/sh
# Bazel's --workspace_status_command (.bazelrc): the source revision the
# nereid binary reports (`nereid --version`, --metrics-json). Outside a git
# checkout the revision is "unknown".
rev=$(git rev-parse --short=12 HEAD 2>/dev/null) || rev=unknown
if [ "$rev" != unknown ] && ! git diff --quiet HEAD -- 2>/dev/null; then rev="$rev-dirty"; fi
echo "STABLE_NEREID_REVISION $rev"
