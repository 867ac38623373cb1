#!/usr/bin/env bash
# Supply-chain checks with cargo-deny (config: deny.toml): licences, bans and sources, which
# need no network, then advisories against the RustSec database.
#
# The advisory database is a git repository on GitHub. Where it can be fetched, the check runs
# against the live database. Where it cannot (this project's machines and CI reach only
# package registries), it runs offline against the snapshot committed in
# .ci/advisory-db.tar.gz (see .ci/advisory-db.txt for its commit and date, and
# scripts/update-advisory-db.sh to refresh it), and says so, with the snapshot's age: such a
# run cannot know advisories published after the snapshot.
#
# Usage: scripts/deny.sh   (from anywhere; needs cargo-deny: cargo install cargo-deny --locked)
set -euo pipefail
cd "$(dirname "$0")/.."

# The workspace, and fuzz/ (its own workspace, with its own lock file), with one config.
manifests=(Cargo.toml fuzz/Cargo.toml)
deny() {
  local manifest=$1
  shift
  cargo deny --manifest-path "$manifest" "$@"
}
# Checks advisories for every manifest; extra arguments go before `check`.
advisories() {
  for manifest in "${manifests[@]}"; do
    echo "== $manifest"
    local lints=()
    # The async-std acknowledgement concerns the workspace; fuzz/ does not use async-std.
    [ "$manifest" = fuzz/Cargo.toml ] && lints=(--allow advisory-not-detected)
    deny "$manifest" "$@" check advisories "${lints[@]}"
  done
}

for manifest in "${manifests[@]}"; do
  echo "== $manifest"
  deny "$manifest" --config deny.toml check licenses bans sources
done

if cargo deny fetch db 2>/dev/null; then
  echo "advisories: against the live RustSec database"
  advisories --config deny.toml
  exit 0
fi

snapshot_commit=$(sed -n 's/^commit: //p' .ci/advisory-db.txt)
snapshot_date=$(sed -n 's/^date: //p' .ci/advisory-db.txt)
age_days=$(( ($(date +%s) - $(date -d "$snapshot_date" +%s)) / 86400 ))
echo "advisories: the RustSec database cannot be fetched here; checking against the committed"
echo "snapshot ${snapshot_commit:0:12} of $snapshot_date ($age_days days old)."
if [ "$age_days" -gt 90 ]; then
  echo "WARNING: the advisory snapshot is more than 90 days old; refresh it with"
  echo "         scripts/update-advisory-db.sh where GitHub can be reached."
fi

# cargo-deny opens the database as a git repository under <db-path>/<name>-<hash of its URL>.
# Build that from the snapshot in target/, committed with the snapshot's own date.
root="$PWD/target/advisory-db-snapshot"
config="$root/deny.toml"
rm -rf "$root"
mkdir -p "$root/dbs"
{
  sed -n '1,/^\[advisories\]$/p' deny.toml
  echo "db-path = \"$root/dbs\""
  # The snapshot's age is reported above; cargo-deny's own 90-day limit would fail the run
  # for a reason this machine cannot fix.
  echo 'maximum-db-staleness = "P3650D"'
  sed -n '/^\[advisories\]$/,$p' deny.toml | sed 1d
} >"$config"
# Ask cargo-deny where it looks for the database (the directory name is its own hash).
# (That run fails, as nothing is there yet.)
probe=$(cargo deny -L debug --offline --config "$config" check advisories 2>&1 || true)
db_dir=$(sed -n "s/.*Opening advisory database at '\([^']*\)'.*/\1/p" <<<"$probe" | head -n 1)
if [ -z "$db_dir" ]; then
  echo "could not find where cargo-deny opens its advisory database:" >&2
  echo "$probe" >&2
  exit 1
fi
mkdir -p "$db_dir"
tar -xzf .ci/advisory-db.tar.gz -C "$db_dir" --strip-components=1
(
  cd "$db_dir"
  git init -q
  git add -A
  GIT_AUTHOR_DATE="$snapshot_date" GIT_COMMITTER_DATE="$snapshot_date" \
    git -c user.name=snapshot -c user.email=snapshot@localhost -c commit.gpgsign=false \
    commit -q -m "RustSec advisory-db snapshot $snapshot_commit"
)
advisories --offline --config "$config"
