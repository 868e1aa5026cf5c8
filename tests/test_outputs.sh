#!/usr/bin/env bash
# Every output option of every command against hostile targets (issue 31, F1 and F7 of the
# round-3 review), one ctest test per writer (tests/cli_tests.cmake):
#   bash test_outputs.sh ATTN WRITER TMPDIR DATES_MODEL_DIR
# WRITER names a command and its output option (below).  For each, the target is:
#   regular    an existing file: replaced, its permissions kept, no temporary file left
#   null       a private /dev/null (mknod c 1 3): written in place, still a device
#   full       a private /dev/full (mknod c 1 7): an error naming the reason, still a device
#   fifo       a FIFO with a reader: the bytes reach the reader, still a FIFO
#   fifo_none  a FIFO with no reader: refused at once (no hang), still a FIFO
#   link       a symbolic link to a file: the file replaced, the link kept
#   dangling   a symbolic link to a missing file: refused, nothing created
#   planted    links planted at the old fixed temporary name PATH.tmp and at names of our
#              form: their victims untouched
#   stale      a temporary file of our form left by a dead process: removed by the write;
#              one of a live process: kept
#   directory  a directory: refused, untouched
#   fsize      a file size limit (ulimit -f) below the output: an error (EFBIG, not SIGXFSZ),
#              the old file intact, no temporary file left
#   diskfull   a full file system (tmpfs): an error, the old file intact, no temporary left
#   readonly   a read-only file system: an error, the old file intact
# The last two need mount (root); they say so and pass when it is not allowed here.  Directory
# outputs (train ... -o DIR, export --hf DIR) are checked for planted, stale, fsize and diskfull
# on the files they write.
set -u
ATTN=$1 CASE=$2 TMP=$3 DATES=${4:-}
RUN_TIMEOUT=120
. "$(dirname "$0")/cli_lib.sh" # $T, fail, run, err_has, out_has

G=fixtures/llama_tiny.gguf
# write TARGET: the writer's command, writing its output to TARGET
write() {
    case $CASE in
    eval) "$ATTN" eval fixtures/multihead_attention_1.safetensors -o "$1" ;;
    export_gguf) "$ATTN" export --model $G --gguf "$1" ;;
    logits) "$ATTN" generate --model $G --prompt hi -n 2 -q --logits "$1" ;;
    save_init) "$ATTN" bench --op gpt-step --batch 1 --len 8 --layers 1 --heads 2 --dim 8 \
        --vocab 64 --repeat 1 --save-init "$1" ;;
    heatmap) "$ATTN" heatmap --model "$DATES/model.safetensors" -o "$1" 21.11.2026 ;;
    train_lm) mktext "$T/text.txt"
        "$ATTN" train lm --init $G --text "$T/text.txt" --steps 1 --len 16 --batch 1 -q \
            --save-every 1 -o "$1" ;;
    export_hf) "$ATTN" export --model $G --hf "$1" ;;
    *) echo "unknown writer $CASE" >&2; return 2 ;;
    esac
}
# directory writers: -o DIR, and the file inside it that the checks look at
case $CASE in
train_lm) DIROUT=state.safetensors ;;
export_hf) DIROUT=model.safetensors ;;
*) DIROUT= ;;
esac

# w RC_WANTED TARGET: runs the writer (stdout and stderr to $T/out, $T/err)
w() {
    local want=$1
    timeout "$RUN_TIMEOUT" bash -c "$(declare -f write mktext); ATTN='$ATTN' CASE='$CASE' \
        G='$G' DATES='$DATES' T='$T' write '$2'" >"$T/out" 2>"$T/err"
    RC=$?
    [ "$RC" = 124 ] && fail "timed out writing $2"
    if [ "$want" = fail ]; then
        [ "$RC" != 0 ] || fail "writing $2 succeeded, expected a failure"
        [ "$RC" -lt 128 ] || fail "writing $2 died of signal $((RC - 128))"
    else
        [ "$RC" = "$want" ] || fail "exit status $RC writing $2, expected $want"
    fi
}
# no_temps DIR: no temporary file of ours (or of the old fixed form) left in DIR
no_temps() {
    local left
    left=$(find "$1" -maxdepth 1 \( -name '.*.tmp-*' -o -name '*.tmp' \) ! -name 'stale-*' \
        -print 2>/dev/null)
    [ -z "$left" ] || fail "temporary files left in $1: $left"
}
# try_mount SIZE DIR: a tmpfs of SIZE at DIR; 1 (with a note) when mount is not allowed
try_mount() {
    mkdir -p "$2"
    if ! mount -t tmpfs -o "size=$1" tmpfs "$2" 2>/dev/null; then
        echo "note: cannot mount a tmpfs here (not root, or no mount in this container): the" \
             "$3 case is not checked"
        return 1
    fi
    MOUNTS="${MOUNTS:-} $2"
    return 0
}
cleanup_mounts() { for m in ${MOUNTS:-}; do umount "$m" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup_mounts EXIT

# a reference output (what a good write produces), its size, and a sentinel for the victims
mkdir -p "$T/ref"
if [ -n "$DIROUT" ]; then
    w 0 "$T/ref/out"
    REFSIZE=$(stat -c %s "$T/ref/out/$DIROUT")
else
    w 0 "$T/ref/out"
    REFSIZE=$(stat -c %s "$T/ref/out")
fi
[ "$REFSIZE" -gt 0 ] || fail "the reference output is empty"
old() { printf 'the old contents\n' >"$1"; }
is_old() { [ "$(cat "$1" 2>/dev/null)" = "the old contents" ]; }

if [ -z "$DIROUT" ]; then
    # regular: replaced, permissions kept
    d=$T/regular; mkdir -p "$d"; old "$d/o"; chmod 640 "$d/o"
    w 0 "$d/o"
    [ "$(stat -c %s "$d/o")" -gt 17 ] || fail "regular: not replaced"
    [ "$(stat -c %a "$d/o")" = 640 ] || fail "regular: permissions $(stat -c %a "$d/o"), expected 640"
    no_temps "$d"
    # null, full: private device nodes (mknod needs root: skipped, said, without it)
    d=$T/dev; mkdir -p "$d"
    if mknod -m 666 "$d/null" c 1 3 2>/dev/null && mknod -m 666 "$d/full" c 1 7 2>/dev/null; then
        w 0 "$d/null"
        [ -c "$d/null" ] || fail "null: no longer a character device"
        w fail "$d/full"
        [ -c "$d/full" ] || fail "full: no longer a character device"
        err_has "No space left on device"
        no_temps "$d"
    else
        echo "note: mknod is not allowed here: the null and full cases are not checked"
    fi
    # fifo with a reader; fifo with none
    d=$T/fifo; mkdir -p "$d"; mkfifo "$d/f" "$d/none"
    (timeout 60 cat "$d/f" >"$d/got") &
    reader=$!
    sleep 0.2
    w 0 "$d/f"
    wait $reader
    [ -p "$d/f" ] || fail "fifo: no longer a FIFO"
    [ "$(stat -c %s "$d/got")" -gt 0 ] || fail "fifo: the reader got nothing"
    w fail "$d/none"
    [ -p "$d/none" ] || fail "fifo_none: no longer a FIFO"
    err_has "no reader"
    # link: the file replaced, the link kept; dangling: refused
    d=$T/link; mkdir -p "$d/real"; old "$d/real/file"; ln -s real/file "$d/l"
    w 0 "$d/l"
    [ -L "$d/l" ] || fail "link: the link was replaced"
    is_old "$d/real/file" && fail "link: the file it names was not written"
    no_temps "$d"; no_temps "$d/real"
    ln -s real/missing "$d/dangling"
    w fail "$d/dangling"
    [ -L "$d/dangling" ] && [ ! -e "$d/real/missing" ] || fail "dangling: something was created"
    err_has "symbolic link to a missing file"
    # planted: links at the old fixed name and at names of our form
    d=$T/planted; mkdir -p "$d"; old "$d/victim"; old "$d/victim2"
    ln -s victim "$d/o.tmp"
    for pid in $$ 1; do ln -s victim2 "$d/.o.tmp-$pid-0000000000000001"; done
    w 0 "$d/o"
    is_old "$d/victim" && is_old "$d/victim2" || fail "planted: a victim was overwritten"
    [ -L "$d/o.tmp" ] || fail "planted: the planted link was removed or replaced"
    # stale: a dead process's temporary file removed, a live one's kept
    d=$T/stale; mkdir -p "$d"
    echo x >"$d/.o.tmp-2147483646-0123456789abcdef"
    echo x >"$d/.o.tmp-$$-0123456789abcdef"
    echo x >"$d/.other.tmp-2147483646-0123456789abcdef"
    w 0 "$d/o"
    [ ! -e "$d/.o.tmp-2147483646-0123456789abcdef" ] || fail "stale: a dead process's file was left"
    [ -e "$d/.o.tmp-$$-0123456789abcdef" ] || fail "stale: a live process's file was removed"
    [ -e "$d/.other.tmp-2147483646-0123456789abcdef" ] || fail "stale: another target's file was removed"
    # directory
    d=$T/dir; mkdir -p "$d/o"; old "$d/o/inside"
    w fail "$d/o"
    [ -d "$d/o" ] && is_old "$d/o/inside" || fail "directory: changed"
    err_has "directory"
    OUTF=o
else
    # directory writers: the same checks on the file inside the folder
    d=$T/planted; mkdir -p "$d/o"; old "$d/victim"
    ln -s ../victim "$d/o/$DIROUT.tmp"
    ln -s ../victim "$d/o/.$DIROUT.tmp-$$-0000000000000001"
    w 0 "$d/o"
    is_old "$d/victim" || fail "planted: the victim was overwritten"
    d=$T/stale; mkdir -p "$d/o"
    echo x >"$d/o/.$DIROUT.tmp-2147483646-0123456789abcdef"
    w 0 "$d/o"
    [ ! -e "$d/o/.$DIROUT.tmp-2147483646-0123456789abcdef" ] || fail "stale: left"
    no_temps "$d/o"
fi

# fsize: a limit below the output; SIGXFSZ must not kill the program
d=$T/fsize; mkdir -p "$d"
if [ -z "$DIROUT" ]; then old "$d/o"; tgt=$d/o; chk=$d/o; else mkdir -p "$d/o"; old "$d/o/$DIROUT"; tgt=$d/o; chk=$d/o/$DIROUT; fi
lim=$(( (REFSIZE / 2) / 1024 )) # ulimit -f counts KiB; 0 refuses every byte
# the limit on the writer alone (its messages go through a pipe: a file would be limited too)
timeout "$RUN_TIMEOUT" bash -c "$(declare -f write mktext); ulimit -f $lim; ATTN='$ATTN' \
    CASE='$CASE' G='$G' DATES='$DATES' T='$T' write '$tgt'" 2>&1 | cat >"$T/err"
RC=${PIPESTATUS[0]}
[ "$RC" != 0 ] || fail "fsize: the write succeeded"
[ "$RC" -lt 128 ] || fail "fsize: died of signal $((RC - 128))"
is_old "$chk" || fail "fsize: the old file was changed"
no_temps "$(dirname "$chk")"
err_has "File too large"

# diskfull: a tmpfs filled up
d=$T/small
if try_mount 64k "$d" diskfull; then
    if [ -z "$DIROUT" ]; then old "$d/o"; tgt=$d/o; chk=$d/o; else mkdir -p "$d/o"; old "$d/o/$DIROUT"; tgt=$d/o; chk=$d/o/$DIROUT; fi
    dd if=/dev/zero of="$d/fill" bs=4k 2>/dev/null
    w fail "$tgt"
    is_old "$chk" || fail "diskfull: the old file was changed"
    no_temps "$(dirname "$chk")"
    err_has "No space left on device"
fi

# readonly: a tmpfs remounted read-only
d=$T/ro
if try_mount 1m "$d" readonly; then
    if [ -z "$DIROUT" ]; then old "$d/o"; tgt=$d/o; chk=$d/o; else mkdir -p "$d/o"; old "$d/o/$DIROUT"; tgt=$d/o; chk=$d/o/$DIROUT; fi
    if mount -o remount,ro "$d" 2>/dev/null; then
        w fail "$tgt"
        is_old "$chk" || fail "readonly: the old file was changed"
        err_has "Read-only file system"
    else
        echo "note: cannot remount read-only here: the readonly case is not checked"
    fi
fi
echo "ok: $CASE"
exit 0
