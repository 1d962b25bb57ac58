#!/usr/bin/env bash
# The run report in a real browser (Debian's chromium, headless): the page script binds every line
# chart and runs without a console error, the hover readout answers a pointer, the sections are
# there, and the screenshot is a drawn page, not a blank one. Each check is first shown to fail on a
# page made to fail it (a broken script, no script, a blank page).
set -u
LATTICE=$1
SCRATCH=$2
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$(dirname "$0")/lib/check.sh"
. "$(dirname "$0")/lib/hostile.sh"
PY=python3; [ -x /usr/bin/python3 ] && PY=/usr/bin/python3
PNG_STATS="$(dirname "$0")/lib/png_stats.py"
export OMP_NUM_THREADS=1
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
check "chromium is installed (scripts/install-deps.sh)" test -n "$CHROMIUM"
[ -n "$CHROMIUM" ] || { echo "0 passed, $failures failed"; exit 1; }
browser() {  # browser ARGS... URL: headless, its own profile, bounded in time; console lines on stderr
  timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
    --user-data-dir="$SCRATCH/profile" --enable-logging=stderr --v=0 "$@"
}
console_errors() { grep -c -E 'CONSOLE.*(Uncaught|Error|error)' "$1"; }

hostile_corpus
"$LATTICE" train --data data --layers 2 --hidden 64 --heads 4 --seq-len 32 --micro-batch 2 --threads 1 --steps 20 \
  --eval-every 5 --report-dir rep 2> train.err
check "a run with --report-dir: exit 0" test $? -eq 0
REPORT="file://$SCRATCH/rep/report.html"
CHARTS=$(grep -o 'class="line-chart"' rep/report.html | wc -l)
check "the report holds line charts ($CHARTS)" test "$CHARTS" -ge 6

browser --dump-dom "$REPORT" > dom.html 2> console.txt
check "the browser loaded the page (exit 0)" test $? -eq 0
check "no console error" test "$(console_errors console.txt)" -eq 0
check "the page script bound every line chart (data-charts-ready=$CHARTS)" grep -q "data-charts-ready=\"$CHARTS\"" dom.html
check "one readout per line chart" test "$(grep -o 'class="readout"' dom.html | wc -l)" -eq "$CHARTS"
check "every section rendered" test "$(grep -c -o -E '<section id="(overview|curves|memory|activations|communication|timeline)">' dom.html)" -ge 1 -a \
  "$(grep -o -E '<section id="[a-z]+">' dom.html | sort -u | wc -l)" -eq 6

# The readout answers a pointer: a mouse event at the middle of the loss chart.
sed 's|</body></html>|<script>var s=document.querySelector("svg.line-chart"),r=s.getBoundingClientRect();s.dispatchEvent(new MouseEvent("mousemove",{clientX:r.left+r.width/2,clientY:r.top+r.height/2,bubbles:true}));document.body.setAttribute("data-readout",s.parentNode.querySelector(".readout").textContent);</script></body></html>|' \
  rep/report.html > hover.html
browser --dump-dom "file://$SCRATCH/hover.html" > hover_dom.html 2> hover_console.txt
check "the hover readout names the series and a step" grep -q -E 'data-readout="train: [0-9.]+  \(step [0-9]+\)' hover_dom.html

# Negative controls: the same checks fail where they should.
sed 's|</body></html>|<script>no_such_function();</script></body></html>|' rep/report.html > broken.html
browser --dump-dom "file://$SCRATCH/broken.html" > /dev/null 2> broken_console.txt
check "control: a broken script is caught as a console error" test "$(console_errors broken_console.txt)" -ge 1
$PY -c "
import re, sys
s = open('rep/report.html').read()
open('noscript.html', 'w').write(re.sub(r'<script>.*?</script>', '', s, flags=re.S))"
browser --dump-dom "file://$SCRATCH/noscript.html" > noscript_dom.html 2> /dev/null
check "control: without the page script no chart is bound" test "$(grep -c 'data-charts-ready' noscript_dom.html)" -eq 0

# The screenshot: the page drawn, not blank.
browser --window-size=1280,2400 --screenshot="$SCRATCH/report.png" "$REPORT" 2> /dev/null
read -r W H INKED COLOURS < <($PY "$PNG_STATS" report.png)
echo "screenshot: ${W}x${H}, inked $INKED, $COLOURS colours"
check "the screenshot is the window's size" test "$W" -eq 1280 -a "$H" -eq 2400
check "the screenshot is drawn (over 3% inked, over 50 colours)" "$PY" -c "import sys; sys.exit(0 if $INKED > 0.03 and $COLOURS > 50 else 1)"
echo "<html><body></body></html>" > blank.html
browser --window-size=1280,2400 --screenshot="$SCRATCH/blank.png" "file://$SCRATCH/blank.html" 2> /dev/null
read -r _ _ BLANK_INKED BLANK_COLOURS < <($PY "$PNG_STATS" blank.png)
check "control: a blank page fails that check" "$PY" -c "import sys; sys.exit(0 if not ($BLANK_INKED > 0.03 and $BLANK_COLOURS > 50) else 1)"

echo "$((failures == 0 ? 1 : 0)) passed, $failures failed"
[ "$failures" -eq 0 ]
