#!/usr/bin/env bash
# attn plot (cli/plot_cmd.c, common/plot.c) on small hand-written training logs, one ctest test per case:
#   bash test_plot.sh ATTN CASE TMPDIR
#   svg     two logs -> SVG: well-formed XML, both legend names, the lines and dots expected
#   png     the same as PNG: the signature and a sane IHDR
#   csv     --csv: the merged series; a step logged twice is taken from its later line
#   errors  no -o, a bad extension, a missing file, a log without a usable line, --labels
#           of the wrong count, --y eval without eval_* values: each refused with its message
set -u
ATTN=$1 CASE=$2 TMP=$3
. "$(dirname "$0")/cli_lib.sh" # $T, fail, run, err_has, out_has

# a: a garbage line, a NaN loss (step 50), step 100 logged twice (the later line: 0.75), a
# resumed run's repeats after it; b: eval_accuracy every 40 steps
mklogs() {
    {
        echo 'this is not json {'
        for s in 10 20 30 40 50 60 70 80 90 100; do
            loss=$(awk "BEGIN{print 4 - $s / 40}")
            [ $s = 50 ] && loss=NaN
            [ $s = 100 ] && loss=5.0
            echo "{\"task\":\"dates\",\"step\":$s,\"loss\":$loss,\"lr\":0.001,\"items_per_s\":$((1000 + s)),\"unit\":\"tokens\",\"elapsed_s\":$s.5,\"extra\":[1,{\"x\":null}]}"
        done
        echo '{"task":"dates","step":100,"loss":0.75,"lr":0.001,"items_per_s":1100,"unit":"tokens","elapsed_s":101.5}'
        echo '[1,2,3]'
        echo '{"no_step":1}'
    } >"$T/a.jsonl"
    {
        for s in 40 80 120; do
            echo "{\"task\":\"dates\",\"step\":$s,\"loss\":$(awk "BEGIN{print 3 - $s / 60}"),\"items_per_s\":900,\"unit\":\"tokens\",\"elapsed_s\":$s,\"eval_accuracy\":0.$((s / 2))}"
        done
    } >"$T/b.jsonl"
}

count() { grep -o -- "$1" "$2" | wc -l | tr -d ' '; }

case $CASE in
svg)
    mklogs
    run 0 "$ATTN" plot "$T/a.jsonl" "$T/b.jsonl" --smooth 0 -o "$T/x.svg"
    out_has "plot: .*x.svg \(2 runs, 3 panels\)"
    err_has "a.jsonl: 1 line not JSON, skipped \(the first: line 1\)"
    err_has "a.jsonl: 1 step logged again"
    if command -v python3 >/dev/null; then
        python3 -c 'import sys, xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1])' "$T/x.svg" ||
            fail "the SVG is not well-formed XML"
    fi
    grep -q '>a</text>' "$T/x.svg" || fail "no legend entry a"
    grep -q '>b</text>' "$T/x.svg" || fail "no legend entry b"
    grep -q '>training loss</text>' "$T/x.svg" || fail "no loss panel"
    grep -q '>eval accuracy</text>' "$T/x.svg" || fail "no eval accuracy panel"
    grep -q '>tokens/s</text>' "$T/x.svg" || fail "no throughput axis title"
    grep -qi 'nan\|inf"' "$T/x.svg" && fail "a non-finite number in the SVG"
    # loss: a in two pieces (the NaN breaks it) and b; eval: b; throughput: a and b
    [ "$(count '<polyline' "$T/x.svg")" = 6 ] ||
        fail "expected 6 polylines, found $(count '<polyline' "$T/x.svg")"
    [ "$(count '<circle' "$T/x.svg")" = 3 ] || fail "expected 3 eval dots"
    # with the default smoothing (a fiftieth of 10 lines: none) the same lines
    run 0 "$ATTN" plot "$T/a.jsonl" "$T/b.jsonl" -q -o "$T/y.svg"
    [ -s "$T/out" ] && fail "-q printed"
    [ "$(count '<polyline' "$T/y.svg")" = 6 ] || fail "default smoothing: expected 6 polylines"
    # --smooth 3: a light line under each smoothed one in the loss panel
    run 0 "$ATTN" plot "$T/a.jsonl" "$T/b.jsonl" -q --smooth 3 --y loss -o "$T/z.svg"
    [ "$(count '<polyline' "$T/z.svg")" = 6 ] || fail "--smooth 3: expected 6 polylines"
    grep -q 'mean of the last 3 values' "$T/z.svg" || fail "--smooth 3: no note"
    # --labels, --title, --x time, --log-y
    run 0 "$ATTN" plot "$T/a.jsonl" "$T/b.jsonl" -q --labels 'run <1>,run 2' --title 'T & t' \
        --x time --log-y -o "$T/w.svg"
    grep -q '>run &lt;1&gt;</text>' "$T/w.svg" || fail "--labels not used (or not escaped)"
    grep -q '>T &amp; t</text>' "$T/w.svg" || fail "--title not used"
    grep -q '>elapsed time (s)</text>' "$T/w.svg" || fail "--x time: no time axis" ;;
png)
    mklogs
    run 0 "$ATTN" plot "$T/a.jsonl" "$T/b.jsonl" -o "$T/x.png"
    [ "$(head -c 8 "$T/x.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
        fail "not a PNG signature"
    [ "$(head -c 16 "$T/x.png" | tail -c 4)" = IHDR ] || fail "no IHDR first"
    w=$(od -An -tu1 -j16 -N4 "$T/x.png" | awk '{print $1*16777216+$2*65536+$3*256+$4}')
    h=$(od -An -tu1 -j20 -N4 "$T/x.png" | awk '{print $1*16777216+$2*65536+$3*256+$4}')
    [ "$w" = 1800 ] || fail "PNG width $w, expected 1800"
    [ "$h" -gt 600 ] && [ "$h" -lt 4000 ] || fail "PNG height $h"
    # -o - with --format writes the same picture to standard output
    run 0 "$ATTN" plot "$T/a.jsonl" "$T/b.jsonl" -q --format png -o -
    cmp -s "$T/out" "$T/x.png" || fail "-o - --format png differs from -o x.png"
    # the extension in capitals
    run 0 "$ATTN" plot "$T/a.jsonl" -q -o "$T/X.PNG"
    [ "$(head -c 4 "$T/X.PNG" | tail -c 3)" = PNG ] || fail ".PNG not a PNG" ;;
csv)
    mklogs
    run 0 "$ATTN" plot "$T/a.jsonl" --csv -q
    out_has '^step,elapsed_s,loss,lr,grad_norm,items_per_s$'
    out_has '^100,101.5,0.75,0.001,,1100$'
    grep -q '^100,.*,5,' "$T/out" && fail "step 100: the earlier line was taken"
    out_has '^50,50.5,,0.001,,1050$'
    [ "$(wc -l <"$T/out")" = 11 ] || fail "expected a header and 10 steps"
    run 0 "$ATTN" plot "$T/a.jsonl" "$T/b.jsonl" --csv -q --labels 'x,y"z'
    out_has '^run,step,elapsed_s,loss,lr,grad_norm,items_per_s,eval_accuracy$'
    out_has '^"y""z",80,80,1.66667,,,900,0.4$' ;;
errors)
    mklogs
    run 2 "$ATTN" plot "$T/a.jsonl"
    err_has "attn plot: -o OUT.svg or OUT.png \(or --csv\) is required"
    run 2 "$ATTN" plot "$T/a.jsonl" -o "$T/x.jpg"
    err_has "x.jpg: the output must end in .svg or .png"
    [ -e "$T/x.jpg" ] && fail "wrote x.jpg"
    run 2 "$ATTN" plot -o "$T/x.svg"
    err_has "no LOG to plot"
    run 2 "$ATTN" plot "$T/a.jsonl" -o -
    err_has "-o - needs --format"
    run 1 "$ATTN" plot "$T/missing.jsonl" -o "$T/x.svg"
    err_has "attn plot: cannot open .*missing.jsonl: No such file or directory"
    printf 'not json\n[1]\n{"loss": 1}\n{"step": "ten"}\n{"step": NaN}\n' >"$T/none.jsonl"
    run 1 "$ATTN" plot "$T/a.jsonl" "$T/none.jsonl" -o "$T/x.svg"
    err_has "attn plot: .*none.jsonl: no usable line"
    : >"$T/empty.jsonl"
    run 1 "$ATTN" plot "$T/empty.jsonl" -o "$T/x.svg"
    err_has "empty.jsonl: no usable line .* in 0 lines"
    run 1 "$ATTN" plot "$T" -o "$T/x.svg"
    err_has "is a directory"
    run 2 "$ATTN" plot "$T/a.jsonl" "$T/b.jsonl" --labels one -o "$T/x.svg"
    err_has "--labels has 1 name for 2 logs"
    run 1 "$ATTN" plot "$T/a.jsonl" --y eval -o "$T/x.svg"
    err_has "no eval_\* values in the log"
    [ -e "$T/x.svg" ] && fail "a refused plot wrote its output"
    # a line over 64 KiB is skipped with a note naming it; the others still count
    { head -c 70000 /dev/zero | tr '\0' ' '; echo '{"step":1}'; echo '{"step":2,"loss":1}'; } \
        >"$T/long.jsonl"
    run 0 "$ATTN" plot "$T/long.jsonl" --csv
    err_has "long.jsonl: 1 line over 65536 bytes, skipped \(the first: line 1\)"
    out_has '^2,,1,,,$'
    true ;;
*)
    fail "unknown case" ;;
esac
exit 0
