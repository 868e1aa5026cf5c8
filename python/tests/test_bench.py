"""python -m attn.bench --quick: the benchmark's code runs (tiny sizes), its JSON and its table
say what they should.  The real sizes are for an idle machine (docs/python.md)."""
import json
import math
import os
import subprocess
import sys

import pytest

from attn import bench

from conftest import FIXTURES, REPO

BERT = os.path.join(FIXTURES, "bert_tiny")


def _cli_args():
    cli = os.path.join(REPO, "build", "attn")  # the C build of the source tree (CI makes it)
    return ["--attn-cli", cli] if os.access(cli, os.X_OK) else []


def _json(capsys, argv):
    assert bench.main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_quick_embed_without_torch(capsys):
    r = _json(capsys, ["--quick", "--json", "--repeat", "1", "--threads", "1", "--only", "embed",
                       "--minilm", BERT] + _cli_args())
    assert r["quick"] and r["machine"]["threads"] == 1 and r["machine"]["cpu"]
    e = r["sections"]["embed"]
    assert e["sentences"] == 16
    for k in ("encode_batch32", "encode_one_call"):
        assert e["rows"][k]["sentences_per_s"] > 0
    if _cli_args():
        assert e["rows"]["attn_embed_cli"]["sentences_per_s"] > 0
        assert e["ratio_encode_batch32_over_cli"] > 0
    else:
        assert e["attn_embed"].startswith("skipped")


def test_quick_all_sections(capsys):
    pytest.importorskip("torch")
    import attn.torch
    r = _json(capsys, ["--quick", "--json", "--repeat", "1", "--threads", "2",
                       "--minilm", BERT] + _cli_args())
    s = r["sections"]
    assert set(s) == {"sdpa", "overhead", "gpt", "embed"}
    for case in ("full", "causal"):
        c = s["sdpa"]["cases"][case]
        assert c["max_abs_diff"] < 1e-4
        assert c["speedup_fwd_bwd"] > 0 and c["speedup_fwd"] > 0
        assert len(c["fwd_bwd"]["attn"]["runs_s"]) == 1
    us = s["overhead"]["us_per_call"]
    assert all(v > 0 for v in us.values()) and "attn_c_call" in us and "torch_fwd" in us
    g = s["gpt"]
    assert g["layers"] == 2 and g["speedup"] > 0
    assert math.isclose(g["loss_attn"], g["loss_torch"], rel_tol=1e-4)
    assert not attn.torch.is_patched()  # the bench leaves torch as it found it


def test_quick_table_and_encoder_model(capsys):
    pytest.importorskip("torch")
    assert bench.main(["--quick", "--repeat", "1", "--only", "overhead,gpt",
                       "--gpt-model", "encoder"]) == 0
    out = capsys.readouterr().out
    assert "µs per call" in out and "GPT training step (encoder" in out and "speedup" in out


def test_find_model_dir_and_sentences(tmp_path):
    assert bench.find_model_dir(BERT, str(tmp_path)) == BERT
    assert bench.find_model_dir(FIXTURES, str(tmp_path)).startswith(FIXTURES)
    with pytest.raises(FileNotFoundError):
        bench.find_model_dir(str(tmp_path), str(tmp_path))
    a, b = bench.sentences(5), bench.sentences(5)
    assert a == b and all(4 <= len(x.split()) <= 40 for x in a)


def test_module_entry_point():
    p = subprocess.run([sys.executable, "-m", "attn.bench", "--help"], capture_output=True,
                       text=True, cwd=os.path.dirname(REPO))
    assert p.returncode == 0 and "--minilm" in p.stdout and "--quick" in p.stdout
    p = subprocess.run([sys.executable, "-m", "attn.bench", "--only", "nope"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "unknown section" in p.stderr
