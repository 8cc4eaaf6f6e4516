#!/usr/bin/env bash
# Check that te_compiler_cache.patch applies cleanly to a TVM v0.19.0 source tree.
# Not part of CI (it needs a TVM checkout or clone).
#
#   check_patch.sh TVM_CHECKOUT                 # a work tree at v0.19.0: git apply --check there
#   check_patch.sh --git-dir GIT_DIR [COMMIT]   # a (bare) clone: check against COMMIT's files
#                                               # (default c4dc0c29, the v0.19.0 release commit)
#
# Exit status 0 when the patch applies, non-zero (with git's message) when it does not.
set -euo pipefail

PATCH="$(cd "$(dirname "$0")" && pwd)/te_compiler_cache.patch"
V0190=c4dc0c29ff81ddae688da24625a603da3b4a2c0e

usage() { sed -n '2,9p' "$0" >&2; exit 2; }

if [[ $# -ge 1 && "$1" == "--git-dir" ]]; then
  [[ $# -ge 2 ]] || usage
  git_dir="$2"; commit="${3:-$V0190}"
  tree="$(mktemp -d)"; trap 'rm -rf "$tree"' EXIT
  git --git-dir="$git_dir" archive "$commit" src/relay/backend/te_compiler_cache.cc | tar -x -C "$tree"
  git -C "$tree" init -q
  target="$tree"; what="$git_dir at $commit"
elif [[ $# -eq 1 ]]; then
  target="$1"; what="$1"
else
  usage
fi

git -C "$target" apply --check "$PATCH"
echo "te_compiler_cache.patch applies cleanly to $what"
