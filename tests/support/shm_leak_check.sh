#!/bin/sh
# Finds collie shared-memory objects that a test left in /dev/shm.
#
#   shm_leak_check.sh snapshot FILE            records the collie-* entries now in FILE
#   shm_leak_check.sh check FILE WHAT [GRACE]  fails naming every leaked entry
#
# tests/CMakeLists.txt runs `snapshot` before and `check` after every test labelled
# faults (ctest fixtures), and tests/multiprocess/shm_leak_test.sh around each job.
#
# A leaked entry is one that is new since the snapshot and that no live process holds
# (mapped: /proc/PID/maps, or open: /proc/PID/fd) for GRACE seconds (default 5). Why not
# simply "new since the snapshot": ctest -j2 runs other tests beside a faults test, and
# their jobs' segments legitimately exist while their ranks connect; those ranks map
# their own segment from creation until they unlink it, so "held by a live process" is
# exactly "may still be unlinked by its owner". An entry nobody holds has no owner left
# to unlink it; the grace lets a launcher that is still reaping its ranks (another test's
# `collie run`) remove its job's names first. Faults tests are not serialised: a leak of
# a concurrent test can then be reported by this test's check as well (it still is a
# leak); the check removes what it reports, so the next check does not report it again
# and the machine does not fill up. ctest also defers fixture cleanups (with -j2 it ran
# every <test>_shm_after at the end of `ctest -L faults`), so a leak is reported by the
# first check that runs after it: each entry is listed with its time, and
# `ctest -R '^<test>$'` runs one test between its own checks.
set -u
mode=${1:-}
file=${2:-}
[ -n "$mode" ] && [ -n "$file" ] || {
  echo "usage: shm_leak_check.sh snapshot FILE | check FILE WHAT [GRACE_S]" >&2
  exit 2
}

list() { ls /dev/shm 2>/dev/null | grep '^collie-' | sort; }

# Whether a live process maps or holds open /dev/shm/$1.
held() {
  grep -qsF "/dev/shm/$1" /proc/[0-9]*/maps 2>/dev/null && return 0
  [ -n "$(find /proc/[0-9]*/fd -lname "/dev/shm/$1" 2>/dev/null | head -1)" ]
}

# New entries that nobody holds, one per line.
orphans() {
  list | comm -13 "$file" - | while read -r name; do
    held "$name" || echo "$name"
  done
}

case "$mode" in
  snapshot)
    list >"$file"
    ;;
  check)
    what=${3:-the test}
    grace=${4:-5}
    [ -f "$file" ] || { echo "shm_leak_check: no snapshot $file" >&2; exit 2; }
    waited=0
    found=$(orphans)
    # Tenths of a second, so that the common case (nothing found) costs one scan.
    while [ -n "$found" ] && [ "$waited" -lt $((grace * 10)) ]; do
      sleep 0.2
      waited=$((waited + 2))
      found=$(orphans)
    done
    if [ -n "$found" ]; then
      echo "FAIL: collie shared memory held by no process appeared in /dev/shm since $what" \
        "started (it or a faults test run meanwhile left it):" >&2
      for name in $found; do
        info=$(stat -c '%s bytes, modified %y' "/dev/shm/$name" 2>/dev/null || echo 'gone')
        echo "  /dev/shm/$name ($info)" >&2
        rm -f "/dev/shm/$name"
      done
      exit 1
    fi
    echo "shm_leak_check: $what left nothing in /dev/shm"
    ;;
  *)
    echo "shm_leak_check: unknown mode '$mode'" >&2
    exit 2
    ;;
esac
