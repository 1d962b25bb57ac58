# For the scripts that count `fails` (sourced; needs LATTICE and SCRATCH): fail, the exit status and
# one-line error of a sub-command, and a written SVG checked whole.
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

expect_status() {  # expect_status <sub-command> <status> <text in stderr> <args...>
  local sub=$1 want=$2 text=$3; shift 3
  "$LATTICE" "$sub" "$@" > "$SCRATCH/out" 2> "$SCRATCH/err"
  local got=$?
  if [ "$got" -ne "$want" ] || [ "$(wc -l < "$SCRATCH/err")" -ne 1 ] || ! grep -q -- "$text" "$SCRATCH/err" ||
     ! grep -q "^lattice $sub: error: " "$SCRATCH/err"; then
    fail "$sub $* -> exit $got (want $want), stderr: $(cat "$SCRATCH/err")"
  fi
}

svg_complete() {  # svg_complete FILE: written, one whole well-formed SVG, no temporary file beside it
  local f=$1
  [ -s "$f" ] || fail "--svg writes the file"
  head -c 4 "$f" | grep -q "<svg" || fail "the file is an SVG"
  tail -n 1 "$f" | grep -q "</svg>" || fail "the SVG is complete"
  ls "$f".* > /dev/null 2>&1 && fail "no temporary file left behind"
  if command -v python3 > /dev/null; then
    python3 -c "import sys, xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1])" "$f" || fail "the SVG is well-formed XML"
  fi
}
