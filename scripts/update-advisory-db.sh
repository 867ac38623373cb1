#!/usr/bin/env bash
# Refreshes the RustSec advisory-database snapshot that scripts/deny.sh checks against where
# GitHub cannot be reached: .ci/advisory-db.tar.gz (the crates/ folder and the licence) and
# .ci/advisory-db.txt (its commit and date).
#
# Usage: scripts/update-advisory-db.sh [PATH-TO-AN-ADVISORY-DB-GIT-CHECKOUT]
# Without a path it clones https://github.com/rustsec/advisory-db (needs GitHub).
set -euo pipefail
cd "$(dirname "$0")/.."

source=${1:-}
if [ -z "$source" ]; then
  source=$(mktemp -d)
  trap 'rm -rf "$source"' EXIT
  git clone --depth 1 https://github.com/rustsec/advisory-db "$source"
fi
commit=$(git -C "$source" rev-parse HEAD)
date=$(git -C "$source" show -s --format=%cI HEAD)
git -C "$source" archive --format=tar --prefix=advisory-db/ HEAD crates LICENSE.txt |
  gzip -9n >.ci/advisory-db.tar.gz
sed -i "s/^commit: .*/commit: $commit/; s/^date: .*/date: $date/" .ci/advisory-db.txt
echo "snapshot: $commit of $date ($(tar -tzf .ci/advisory-db.tar.gz | grep -c '\.md$') advisories)"
