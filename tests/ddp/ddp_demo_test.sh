#!/bin/sh
# `collie run -n 2 -- collie ddp-demo` with tiny settings: it finishes, prints the
# overlap figures, writes the trace and SVG, and resumes from its checkpoint.
# Usage: ddp_demo_test.sh path/to/collie
set -u
collie=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
small="--layers 4 --params-per-layer 20000 --ms-per-layer 2 --steps 3 --batch 2 --bucket-cap-mb 0.1 --first-bucket-mb 0.05"

COLLIE_TRACE="$tmp/trace.json" "$collie" run -n 2 -- "$collie" ddp-demo $small \
    --svg "$tmp/t.svg" --checkpoint "$tmp" >"$tmp/out" 2>"$tmp/err" || fail "ddp-demo failed: $(cat "$tmp/err")"
cat "$tmp/out"
grep -q "communication hidden" "$tmp/out" || fail "no overlap summary"
grep -q "bucket 0:" "$tmp/out" || fail "no bucket layout"
grep -q "2\*Psi\*(N-1)/N" "$tmp/out" || fail "no volume formula"
[ "$(grep -c '^ *[0-9]' "$tmp/out")" -eq 3 ] || fail "expected 3 step lines"
grep -q "<svg" "$tmp/t.svg" || fail "no SVG"
grep -q "rank 1 all-reduce" "$tmp/t.svg" || fail "SVG lacks rank 1's lane"
python3 -c "
import json, sys
doc = json.load(open(sys.argv[1]))
ev = [e for e in doc['traceEvents'] if e.get('ph') == 'X']
assert {e['pid'] for e in ev} == {0, 1}, 'events of both ranks'
assert any(e['name'].startswith('allreduce') for e in ev)
" "$tmp/trace.json" || fail "bad trace JSON"
[ -f "$tmp/collie_ddp_checkpoint.bin" ] || fail "no checkpoint"

"$collie" run -n 2 -- "$collie" ddp-demo $small --checkpoint "$tmp" --resume --optimizer sgd \
    >"$tmp/out2" 2>"$tmp/err2" || fail "resume failed: $(cat "$tmp/err2")"
grep -q "resumed at step 3" "$tmp/out2" || fail "resume did not start at step 3: $(cat "$tmp/out2")"
grep -q "^ *5 " "$tmp/out2" || fail "resumed run did not reach step 5"

"$collie" run -n 2 -- "$collie" ddp-demo --optimizer nope >/dev/null 2>"$tmp/err3" && fail "bad optimizer accepted"
grep -q "optimizer must be sgd or adam" "$tmp/err3" || fail "no message for a bad optimizer"

[ "$failures" -eq 0 ] || exit 1
echo "ddp_demo_test: all checks passed"
