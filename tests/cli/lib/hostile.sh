# For the hostile-input scripts (sourced after check.sh; needs LATTICE and a current directory):
# hostile NAME STATUS PATTERN -- ARGS...  runs `lattice ARGS`, then checks the exit status (1 or 2
# as given), that stderr is exactly one line, that it names the cause (grep -E PATTERN), that no
# signal ended the process, and that nothing under data/ or $PROTECT (extra paths) changed.
# Counts tried/ok in HOSTILE_TRIED / HOSTILE_FAILED for the summary line.
HOSTILE_TRIED=0
HOSTILE_FAILED=0
fingerprint() { find data ${PROTECT:-} -type f -print0 2>/dev/null | sort -z | xargs -0 -r md5sum; }
hostile() {
  local name=$1 want=$2 pattern=$3; shift 4  # the 4th word is the "--" separator
  local before after status before_failures=$failures
  before=$(fingerprint)
  timeout 120 "$LATTICE" "$@" > hostile.out 2> hostile.err
  status=$?
  after=$(fingerprint)
  HOSTILE_TRIED=$((HOSTILE_TRIED + 1))
  check "$name: exit $want (got $status)" test "$status" -eq "$want"
  check "$name: one stderr line" test "$(wc -l < hostile.err)" -eq 1
  check "$name: names the cause" grep -qE -- "$pattern" hostile.err
  check "$name: no file of the user's touched" test "$before" = "$after"
  [ "$failures" -gt "$before_failures" ] && { HOSTILE_FAILED=$((HOSTILE_FAILED + 1)); echo "  stderr: $(head -c 300 hostile.err)"; }
  return 0
}
hostile_summary() { echo "hostile cases: $HOSTILE_TRIED tried, $((HOSTILE_TRIED - HOSTILE_FAILED)) ended with one clear line"; }
hostile_corpus() {  # corpus.txt and its data/ (train.bin, val.bin), shared by the hostile scripts
  for i in $(seq 1 400); do echo "In the beginning $i the word was with the text, and the text was good."; done > corpus.txt
  "$LATTICE" prepare --input corpus.txt --out data 2>/dev/null
}
