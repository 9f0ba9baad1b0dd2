#!/bin/bash
# The public-surface test cases of the public TileLang corpus (.compat/tests_public_surface.txt)
# on the GPU machine, in chunks of at most 8 cases of one file, each chunk its own process under
# `timeout` (a hung kernel blocks inside CUDA, where pytest's own timeout cannot interrupt it):
#   run(command="bash tools/compat_gpu_tests.sh 'language' 1/2", carry=[".gpu", ".compat"])
#   run(command="bash tools/compat_gpu_tests.sh 'issue jit kernel profiler cache'", carry=[...])
# Arguments: folders of testing/python, and optionally a part K/N of their chunks.  Logs and a
# JUnit report per chunk land under $OUT; printed last: chunks that timed out, failing cases
# with their first error line, and the count against the bar.
ROOT=$(pwd); DIRS=${1:-language}; PART=${2:-1/1}
source "${GPU_ENV:-$ROOT/.gpu/gpu-env.sh}" > /dev/null || exit 1
export PYTHONPATH=$ROOT:$PYTHONPATH TILELANG_CACHE_DIR=/tmp/tlcache-compat
OUTD=${OUT:-/tmp/compat-out}; mkdir -p "$OUTD/chunks"
C=${CORPUS:-/tmp/corpus}
[ -d $C ] || xz -dc "$ROOT/.compat/corpus.tar.xz" | tar -x -C /tmp || exit 1
python3 - "$ROOT/.compat/tests_public_surface.txt" "$DIRS" "$PART" > "$OUTD/chunks.txt" <<'PY'
import sys
bar, dirs, part = sys.argv[1], sys.argv[2].split(), sys.argv[3]
k, n = map(int, part.split("/"))
by_file = {}
for t in open(bar).read().split():
    f = t.split("::")[0]
    if any(f.startswith(f"testing/python/{d}/") for d in dirs):
        by_file.setdefault(f, []).append(t)
chunks = [ids[i:i + 8] for ids in by_file.values() for i in range(0, len(ids), 8)]
for j, ids in enumerate(chunks):
    if j % n == k - 1:
        print(" ".join(ids))
PY
run_chunk() {
  local ids=$1 name; name=$(echo "$ids" | md5sum | cut -c1-10); t0=$(date +%s)
  (cd "$C" && timeout -k 5 150 python3 -m pytest $ids -q -p no:cacheprovider -o addopts="" \
     --junitxml="$OUTD/chunks/$name.xml" > "$OUTD/chunks/$name.log" 2>&1); rc=$?
  echo "rc=$rc $(( $(date +%s) - t0 ))s $ids" >> "$OUTD/chunks/summary.txt"
}
export -f run_chunk; export OUTD C
xargs -P 14 -d '\n' -I{} bash -c 'run_chunk "{}"' < "$OUTD/chunks.txt"
python3 - "$OUTD" <<'PY' | tee "$OUTD/summary.txt"
import glob, os, sys, xml.etree.ElementTree as ET
outd = sys.argv[1]
want = set(" ".join(open(f"{outd}/chunks.txt").read().split()).split())
got, failed = set(), {}
for xml in glob.glob(f"{outd}/chunks/*.xml"):
    for tc in ET.parse(xml).getroot().iter("testcase"):
        tid = tc.get("classname").replace(".", "/") + ".py::" + tc.get("name")
        bad = [ch for ch in tc if ch.tag in ("failure", "error", "skipped")]
        if not bad:
            got.add(tid)
        else:
            msg = (bad[0].get("message") or bad[0].tag).splitlines()
            failed[tid] = (msg[0] if msg else bad[0].tag)[:150]
summary_file = f"{outd}/chunks/summary.txt"
summary = open(summary_file).read().splitlines() if os.path.exists(summary_file) else []
for line in sorted(summary, key=lambda s: -int(s.split()[1][:-1]))[:8]:
    print("slowest:", line[:170])
for line in summary:
    if line.split()[0] in ("rc=124", "rc=137"):
        print("TIMEOUT:", line[:300])
for tid in sorted(failed):
    if tid in want:
        print("FAIL", tid, "|", failed[tid])
print(f"public-surface cases: {len(want & got)} passed, {len(want - got)} did not (of {len(want)})")
PY
# one archive instead of two files per chunk (the device tool returns a limited number of files)
(cd "$OUTD" && tar -czf chunks.tgz chunks && rm -rf chunks)
