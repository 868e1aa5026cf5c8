#!/usr/bin/env bash
# attn train vit / classify / attention-map on tiny data, one case per ctest test
# (tests/cli_tests.cmake):
#   bash test_vit_cli.sh ATTN GEN CASE TMPDIR DATES_MODEL_DIR CHARLM_MODEL_DIR
# GEN is tests/vit_tiny_data.c built (writes tiny IDX files and PGMs).  The case "setup" writes
# the data to TMPDIR/data and trains a tiny model into TMPDIR/model (a fixture for the others).
# Each case exits 0 when the program behaved, else prints what went wrong and exits 1.
set -u
ATTN=$1 GEN=$2 CASE=$3 TMP=$4 DATES=${5:-} CHARLM=${6:-}
D=$TMP/data M=$TMP/model
TINY="--patch 4 --dim 16 --heads 2 --ffn 32 --layers 2 --batch 64"
. "$(dirname "$0")/cli_lib.sh" # $T, fail, run, err_has, out_has
# is_png FILE: the PNG signature and an IHDR chunk
is_png() {
    [ -s "$1" ] || fail "$1 is missing or empty"
    [ "$(head -c 16 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a0000000d49484452 ] ||
        fail "$1 is not a PNG"
}

case $CASE in
setup)
    rm -rf "$D" "$M"
    mkdir -p "$D" || fail "mkdir $D"
    "$GEN" "$D" 320 100 || fail "the data generator failed"
    run 0 "$ATTN" train vit --data "$D" --limit 256 --epochs 1 $TINY -o "$M"
    out_has "^test accuracy: [0-9.]+% after epoch 1 of 1"
    out_has "^model: .*model.safetensors"
    err_has "^epoch 1/1  train loss [0-9.]+  test loss [0-9.]+  test accuracy"
    err_has "256 training images, 100 test images"
    for f in model.safetensors state.safetensors log.csv loss.svg; do
        [ -s "$M/$f" ] || fail "train vit wrote no $f"
    done
    [ "$(wc -l <"$M/log.csv")" = 2 ] || fail "log.csv: a header and one epoch expected"
    head -1 "$M/log.csv" | grep -q "^epoch,train_loss,test_loss,test_accuracy" || fail "log.csv header"
    # loss.svg: the run's log.jsonl drawn as attn plot draws it (loss, then eval_* panels)
    grep -q ">eval accuracy<" "$M/loss.svg" && grep -q ">training loss<" "$M/loss.svg" ||
        fail "loss.svg lacks the loss or the test accuracy panel"
    run 0 "$ATTN" info "$M/model.safetensors"
    out_has "task = vit"
    out_has "patch = 4"
    out_has "embed.proj.weight +F32 +\[16, 16\]" ;;
tensorboard)     # --tensorboard: the events of the library's vit task against its JSON log
                 # (tests/check_tfevents.py: framing, CRCs, every value; eval/loss, eval/accuracy)
    command -v python3 >/dev/null || { echo "python3 missing: skipped"; exit 0; }
    run 0 "$ATTN" train vit --data "$D" --limit 128 --test-limit 20 --epochs 2 $TINY -q \
        --tensorboard "$T/tb" -o "$T/tb_run"
    [ "$(ls "$T/tb" | grep -c tfevents)" = 1 ] || fail "one event file expected: $(ls "$T/tb")"
    python3 "$(dirname "$0")/check_tfevents.py" "$T/tb" "$T/tb_run/log.jsonl" images >"$T/out" 2>&1 ||
        fail "the events differ from the log" ;;
json)
    run 0 "$ATTN" train vit --data "$D" --limit 64 --test-limit 20 --epochs 1 $TINY -q --json -o "$T/j"
    [ -s "$T/err" ] && fail "-q printed on stderr"
    [ "$(wc -l <"$T/out")" = 1 ] || fail "--json: one line expected"
    out_has '^\{"epochs_done": 1, "epochs": 1, .*"test_accuracy": [0-9.]+, "log": \[\{"epoch": 1, "train_loss": '
    out_has '"model": ".*/j/model.safetensors"' ;;
classify_index)
    run 0 "$ATTN" classify --model "$M" --data "$D" --index 3
    out_has "^test image 3 \(label: Dress\)$"
    [ "$(grep -Ec '^ +[0-9]+\.[0-9]{2}%  [A-Z]' "$T/out")" = 5 ] || fail "5 classes expected"
    run 0 "$ATTN" classify --model "$M/model.safetensors" --data "$D" --index 7 --train --json --top 3
    out_has '^\{"index": 7, "set": "train", "label": 7, "label_name": "Sneaker", "top": \[\{"class": [0-9], "name": "[^"]+", "p": 0\.[0-9]+\}, \{[^}]*\}, \{[^}]*\}\]\}$'
    # the state file holds the same model
    run 0 "$ATTN" classify --model "$M/model.safetensors" --data "$D" --index 3
    mv "$T/out" "$T/a"
    run 0 "$ATTN" classify --model "$M/state.safetensors" --data "$D" --index 3
    cmp -s "$T/a" "$T/out" || fail "state.safetensors classifies differently from model.safetensors" ;;
classify_file)   # test0.pgm is test image 0: the same probabilities
    run 0 "$ATTN" classify --model "$M" --data "$D" --index 0
    tail -n +2 "$T/out" >"$T/a"
    run 0 "$ATTN" classify --model "$M" "$D/test0.pgm" "$D/test0.pgm"
    out_has "test0.pgm$"
    [ "$(grep -c test0.pgm "$T/out")" = 2 ] || fail "two images, two results expected"
    head -6 "$T/out" | tail -n +2 >"$T/b"
    cmp -s "$T/a" "$T/b" || fail "test0.pgm classified differently from --index 0"
    # a PNG (written by attention-map) is read too, and refused for its size
    run 0 "$ATTN" attention-map --model "$M" --data "$D" --index 0 -o "$T/a.png"
    run 1 "$ATTN" classify --model "$M" "$T/a.png"
    # a program built without zlib (a cross build without the target's zlib) refuses PNG
    # input, saying why; with it, the size is refused
    if grep -q "built without zlib" "$T/err"; then
        echo "note: attn built without zlib: its PNG input is refused, the size check not run"
    else
        err_has "a.png is [0-9]+x[0-9]+ pixels; the model takes 28x28 images"
    fi
    # an image that is a FIFO (no writer) is refused at once, not waited on (round 3, F9)
    mkfifo "$T/img.pgm"
    RUN_TIMEOUT=20 run 1 "$ATTN" classify --model "$M" "$T/img.pgm"
    err_has "img.pgm: not a regular file \(a FIFO or pipe\)" ;;
attention_map)
    run 0 "$ATTN" attention-map --model "$M" --data "$D" --index 1 -o "$T/map.png"
    out_has "^test image 1: predicted .*, label Trouser$"
    out_has "^attention map: .*map.png$"
    is_png "$T/map.png"
    # 4 panels of 168 pixels (image, 2 layers, rollout): wider than 4 x 168
    w=$(head -c 20 "$T/map.png" | tail -c 4 | od -An -tu1 | awk '{print $1*16777216+$2*65536+$3*256+$4}')
    [ "$w" -gt 672 ] || fail "the picture is $w pixels wide"
    run 0 "$ATTN" attention-map --model "$M" "$D/test0.pgm" -o "$T/f.png"
    is_png "$T/f.png"
    run 0 "$ATTN" attention-map --model "$M" --data "$D" --index 2 --train -o "$T/t.png"
    is_png "$T/t.png" ;;
resume)          # stopped after epoch 1 and resumed = uninterrupted, bit for bit (dropout and
                 # augmentation on, another thread count)
    A="--data $D --limit 200 --test-limit 30 --epochs 2 $TINY --dropout 0.1 -q"
    run 0 "$ATTN" train vit $A -o "$T/full"
    run 0 "$ATTN" train vit $A --stop-after 1 -o "$T/part"
    out_has "stopped after epoch 1 of 2: continue with --resume"
    cmp -s "$T/full/model.safetensors" "$T/part/model.safetensors" &&
        fail "the model after one epoch equals the one after two"
    run 0 "$ATTN" train vit $A --resume --threads 1 -o "$T/part"
    out_has "after epoch 2 of 2"
    cmp -s "$T/full/model.safetensors" "$T/part/model.safetensors" ||
        fail "resumed run's model differs from the uninterrupted run's"
    [ "$(wc -l <"$T/part/log.csv")" = 3 ] || fail "the resumed log.csv lacks an epoch"
    diff <(cut -d, -f1-5 "$T/full/log.csv") <(cut -d, -f1-5 "$T/part/log.csv") >/dev/null ||
        fail "the resumed run's losses differ"
    # another setting is refused, naming it; a finished run resumes to itself
    run 1 "$ATTN" train vit $A --resume --lr 0.01 -o "$T/part"
    err_has "--lr differs from the run being continued \(0.00200000009 there, 0.00999999978 now\)"
    run 1 "$ATTN" train vit $A --resume --dim 32 -o "$T/part"
    err_has "holds another model"
    run 0 "$ATTN" train vit $A --resume -o "$T/part"
    cmp -s "$T/full/model.safetensors" "$T/part/model.safetensors" || fail "re-resuming changed the model"
    run 1 "$ATTN" train vit $A --resume -o "$T/none"
    err_has "--resume: .*none/state.safetensors: No such file .*no earlier run" ;;
missing_data)
    run 1 "$ATTN" train vit --data "$T/nope" $TINY -o "$T/out_dir"
    err_has "nope: no train-images-idx3-ubyte or train-images-idx3-ubyte.gz"
    [ -e "$T/out_dir" ] && fail "train vit created its output folder without data"
    run 1 "$ATTN" classify --model "$M" --data "$T/nope" --index 0
    err_has "no t10k-images-idx3-ubyte"
    run 1 "$ATTN" classify --model "$T/nope" --data "$D" --index 0
    err_has "attn classify: --model .*nope: No such file"
    run 1 "$ATTN" classify --model "$M" "$T/nope.pgm"
    err_has "nope.pgm: No such file" ;;
corrupt)
    mkdir -p "$T/c" "$T/g" "$T/l"
    cp "$D"/t10k-* "$T/c/" && cp "$D"/t10k-* "$T/g/" && cp "$D"/* "$T/l/"
    head -c 5000 "$D/train-images-idx3-ubyte" >"$T/c/train-images-idx3-ubyte"
    cp "$D/train-labels-idx1-ubyte" "$T/c/"
    run 1 "$ATTN" train vit --data "$T/c" $TINY -o "$T/o1"
    err_has "train-images-idx3-ubyte: truncated"
    printf '\037\213\010\000\000\000\000\000\000\003garbage, not deflate' >"$T/g/train-images-idx3-ubyte.gz"
    cp "$D/train-labels-idx1-ubyte" "$T/g/"
    run 1 "$ATTN" train vit --data "$T/g" $TINY -o "$T/o2"
    err_has "train-images-idx3-ubyte.gz: (corrupt|a gzip file)"
    # a label of 12: not a Fashion-MNIST class
    printf '\014' | dd of="$T/l/train-labels-idx1-ubyte" bs=1 seek=20 conv=notrunc 2>/dev/null
    run 1 "$ATTN" train vit --data "$T/l" $TINY -o "$T/o3"
    err_has "labels must be 0..9"
    printf 'P5\n28 28\n255\nshort' >"$T/short.pgm"
    run 1 "$ATTN" classify --model "$M" "$T/short.pgm"
    err_has "short.pgm: truncated PGM"
    # a damaged checkpoint
    head -c 3000 "$M/model.safetensors" >"$T/cut.safetensors"
    run 1 "$ATTN" classify --model "$T/cut.safetensors" --data "$D" --index 0
    err_has "attn classify: .*\(ATTN_E_FORMAT\)" ;;
wrong_size)
    run 1 "$ATTN" classify --model "$M" "$D/big.pgm"
    err_has "big.pgm is 32x32 pixels; the model takes 28x28 images"
    [ -s "$T/out" ] && fail "printed a classification of a wrong-size image"
    run 1 "$ATTN" attention-map --model "$M" "$D/big.pgm" -o "$T/x.png"
    err_has "big.pgm is 32x32 pixels"
    [ -e "$T/x.png" ] && fail "wrote a picture of a wrong-size image"
    run 1 "$ATTN" train vit --data "$D" $TINY --patch 5 -o "$T/p5"
    err_has "--patch 5 does not divide the image size 28"
    run 1 "$ATTN" classify --model "$M" --data "$D" --index 100
    err_has "--index 100: the test set in .* has 100 images" ;;
other_model)     # checkpoints of the other tasks are refused by name
    run 1 "$ATTN" classify --model "$DATES" --data "$D" --index 0
    err_has "model.safetensors: a checkpoint of 'attn train dates', not of 'attn train vit'"
    run 1 "$ATTN" attention-map --model "$CHARLM/model.safetensors" --data "$D" --index 0 -o "$T/x.png"
    err_has "a checkpoint of 'attn train charlm', not of 'attn train vit'"
    run 1 "$ATTN" classify --model fixtures/multihead_attention_1.safetensors --data "$D" --index 0
    err_has "not a checkpoint of 'attn train vit'"
    mkdir -p "$T/r"
    cp "$DATES/state.safetensors" "$T/r/"
    run 1 "$ATTN" train vit --data "$D" --limit 64 $TINY --resume -o "$T/r"
    err_has "state.safetensors: a checkpoint of 'attn train dates', not of 'attn train vit'"
    # and the other tasks refuse a ViT checkpoint
    run 1 "$ATTN" translate --model "$M/model.safetensors" "21 Nov 2026"
    err_has "not a dates checkpoint"
    run 1 "$ATTN" generate --model "$M/model.safetensors"
    err_has "not a charlm checkpoint" ;;
usage)
    run 2 "$ATTN" classify --data "$D" --index 0
    err_has "attn classify: --model DIR is required"
    run 2 "$ATTN" classify --model "$M" --index 0 "$D/test0.pgm"
    err_has "give either --index N or image files"
    run 2 "$ATTN" classify --model "$M"
    run 2 "$ATTN" classify --model "$M" --test --train --index 0
    err_has "exclude each other"
    run 2 "$ATTN" attention-map --model "$M" "$D/test0.pgm" "$D/test0.pgm"
    err_has "one image at a time"
    run 2 "$ATTN" train vit --dim 30 --heads 4
    err_has "--heads 4 must divide --dim 30"
    run 2 "$ATTN" train vit --dtype f16
    err_has "--dtype: expected one of auto, f32, bf16, got 'f16'"
    run 2 "$ATTN" train vit extra
    err_has "unexpected argument 'extra'"
    run 2 "$ATTN" train frobnicate
    err_has "known: dates, charlm, vit" ;;
*)
    fail "unknown case" ;;
esac
exit 0
