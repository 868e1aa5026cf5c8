# Shared by the shell tests of the attn program (test_cli_io.sh, test_llm_cli.sh,
# test_vit_cli.sh, mpi/test_dp_cli.sh), sourced after each sets CASE and TMP (and, where it
# wants them, FAIL_TAG: the failure message's label, default CASE; RUN_TIMEOUT: seconds a run
# may take, default 300).  Makes the case's scratch folder $T (removed on exit).

mkdir -p "$TMP"
T=$(mktemp -d "$TMP/$CASE.XXXXXX")
trap 'rm -rf "$T"' EXIT

# fail MSG: prints what went wrong, with the last run's stderr and stdout, and exits 1
fail() {
    echo "FAIL (${FAIL_TAG:-$CASE}): $*"
    [ -f "$T/err" ] && { echo "--- stderr:"; head -c 3000 "$T/err"; }
    [ -f "$T/out" ] && { echo "--- stdout:"; head -c 3000 "$T/out"; }
    exit 1
}

# run RC_WANTED CMD...: runs CMD (stdout to $T/out, stderr to $T/err, RUN_TIMEOUT seconds at
# most) and checks its exit status (RC_WANTED "any": none); the status is left in RC
run() {
    local want=$1
    shift
    timeout "${RUN_TIMEOUT:-300}" "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    RC=$rc
    [ "$rc" = 124 ] && fail "timed out: $*"
    [ "$want" = any ] || [ "$rc" = "$want" ] || fail "exit status $rc, expected $want: $*"
    return 0
}

# err_has REGEX / out_has REGEX: the last run's stderr / stdout matches
err_has() { grep -Eq -- "$1" "$T/err" || fail "stderr lacks /$1/"; }
out_has() { grep -Eq -- "$1" "$T/out" || fail "stdout lacks /$1/"; }

# mktext FILE: a text of 16 kB whose patterns a tiny model learns in a few steps
mktext() {
    for i in $(seq 1 400); do
        echo "the quick brown fox $((i % 7)) jumps over the lazy dog"
    done >"$1"
}
