"""`infoprobe cache` and infoprobe.pipeline.caching on a saved (untrained) checkpoint."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from infoprobe.checkpoint import load_checkpoint, save_checkpoint
from infoprobe.cli import main
from infoprobe.hooks import ProvenanceMismatchError, open_cache
from infoprobe.model import InfoFlowTransformer, ModelConfig
from infoprobe.pipeline import caching
from infoprobe.pipeline.cache_settings import DATA_SEED_OFFSET
from infoprobe.pipeline.caching import cache_checkpoint, checkpoint_cache_job
from infoprobe.tasks import make_task

N, BATCH = 40, 16


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    task = make_task("intrinsic-dim", T=6, D=2, seed=0)
    cfg = ModelConfig(
        d_in=task.d, n_ctx=task.T, d_model=12, heads=(2, 3), d_mlp=16, d_readout=8, d_out=task.d_out
    )
    path = tmp_path_factory.mktemp("ckpt") / "ckpt"
    save_checkpoint(path, InfoFlowTransformer(cfg, seed=7), task, train_config={"seed": 4})
    return path


def expected_x(task, data_seed: int, n: int = N, batch: int = BATCH) -> np.ndarray:
    """The convention, written out: batch b = task.sample(size_b, default_rng([seed, b]))."""
    sizes = [min(batch, n - start) for start in range(0, n, batch)]
    return np.concatenate(
        [task.sample(s, np.random.default_rng([data_seed, b]))[0] for b, s in enumerate(sizes)]
    )


def cache_argv(checkpoint, out, sites: str = "residual,attention") -> list[str]:
    """`infoprobe cache` arguments for N samples in batches of BATCH."""
    return ["cache", str(checkpoint), "--n", str(N), "--cache-batch", str(BATCH), "--sites", sites,
            "--out", str(out), "--quiet"]  # fmt: skip


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_cli_writes_a_cache_of_the_checkpoints_task(checkpoint, tmp_path, capsys):
    out = tmp_path / "acts.h5"
    rc = main(cache_argv(checkpoint, out))
    assert rc == 0
    printed = capsys.readouterr().out
    assert "estimated size" in printed and "MB" in printed
    assert "blocks.1.hook_resid_post" in printed and "total" in printed
    ck = load_checkpoint(checkpoint)
    with open_cache(out) as cache:
        data_seed = 4 + DATA_SEED_OFFSET
        np.testing.assert_array_equal(cache.x[:], expected_x(ck.task, data_seed))
        assert cache.checkpoint_sha256 == ck.weights_sha256
        assert cache.spec["task"] == ck.task.to_dict()
        assert cache.spec["data_seed"] == data_seed and cache.spec["n"] == N
        assert cache.model_config == ck.model_config.to_dict()
        assert cache.provenance["random_init_seed"] is None
        with torch.inference_mode():
            _, ref = ck.model.run_with_cache(torch.from_numpy(cache.x[:]))
        np.testing.assert_allclose(
            cache["resid_post", -1][:],
            ref["blocks.1.hook_resid_post"].numpy(),
            rtol=1e-5,
            atol=1e-6,
        )

    before = digest(out)
    assert main(cache_argv(checkpoint, out)) == 0
    assert "already complete" in capsys.readouterr().out
    assert digest(out) == before

    assert main(["cache", "info", str(out)]) == 0
    info = capsys.readouterr().out
    assert ck.weights_sha256 in info and "status: complete" in info
    assert "blocks.0.attn.hook_pattern" in info and "sample,head,query,key" in info


def test_cli_refuses_a_mismatched_run_and_leaves_the_file(checkpoint, tmp_path, capsys):
    out = tmp_path / "acts.h5"
    args = cache_argv(checkpoint, out, sites="layers")
    assert main(args) == 0
    before = digest(out)
    assert main([*args, "--data-seed", "3"]) == 2
    err = capsys.readouterr().err
    assert "provenance.data_spec.data_seed" in err and "--overwrite" in err
    assert digest(out) == before
    assert main([*args, "--data-seed", "3", "--overwrite"]) == 0
    with open_cache(out) as cache:
        assert cache.spec["data_seed"] == 3


def test_random_init_control_has_same_samples_and_fresh_weights(checkpoint, tmp_path):
    trained = cache_checkpoint(
        checkpoint, tmp_path / "t.h5", n=N, batch_size=BATCH, sites="layers", progress=False
    )
    control = cache_checkpoint(
        checkpoint,
        tmp_path / "r.h5",
        n=N,
        batch_size=BATCH,
        sites="layers",
        random_init_seed=11,
        progress=False,
    )
    cfg = load_checkpoint(checkpoint).model_config
    fresh = InfoFlowTransformer(cfg, seed=11)
    with open_cache(trained.path) as t, open_cache(control.path) as r:
        np.testing.assert_array_equal(t.x[:], r.x[:])
        assert r.provenance["random_init_seed"] == 11
        assert r.checkpoint_sha256 == t.checkpoint_sha256
        with torch.inference_mode():
            _, ref = fresh.run_with_cache(torch.from_numpy(r.x[:]))
        last = "blocks.1.hook_resid_post"
        np.testing.assert_allclose(r.acts(last)[:], ref[last].numpy(), rtol=1e-5, atol=1e-6)
        assert not np.allclose(r.acts(last)[:], t.acts(last)[:])
    with pytest.raises(ProvenanceMismatchError, match="random_init_seed"):
        cache_checkpoint(
            checkpoint,
            tmp_path / "r.h5",
            n=N,
            batch_size=BATCH,
            sites="layers",
            random_init_seed=12,
            progress=False,
        )


def test_plan_reports_sizes_before_writing(checkpoint, tmp_path):
    job = checkpoint_cache_job(checkpoint, n=N, batch_size=BATCH, sites="layers", dtype="float16")
    # layer sites: [N, T+1, E] float16 x 3, plus x [N, T, d] and y [N, 1] float32
    expected = 3 * N * 7 * 12 * 2 + N * 6 * job.plan.datasets[0].shape[2] * 4 + N * 1 * 4
    assert job.plan.nbytes == expected
    assert list(tmp_path.iterdir()) == []


def test_cli_usage_errors(checkpoint, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:  # argparse: the subcommand needs its FILE
        main(["cache", "info"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "infoprobe cache info: error:" in err and "FILE" in err
    assert main(["cache", str(checkpoint), "--n", "8"]) == 2
    assert "--out" in capsys.readouterr().err
    assert main(["cache", str(tmp_path / "nowhere"), "--out", str(tmp_path / "a.h5")]) == 2
    assert main(["cache", "info", str(tmp_path / "nowhere.h5")]) == 2
    assert "no such file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:  # no model has it: refused as it is parsed
        main(["cache", str(checkpoint), "--sites", "bogus", "--out", str(tmp_path / "a.h5")])
    assert refused.value.code == 2 and "unknown hook site 'bogus'" in capsys.readouterr().err
    argv = ["cache", str(checkpoint), "--sites", "blocks.9.hook_resid_post"]
    assert main([*argv, "--out", str(tmp_path / "a.h5")]) == 2  # this model has no block 9
    assert "valid hook names" in capsys.readouterr().err


def test_help_teaches_both_forms(capsys):
    with pytest.raises(SystemExit):
        main(["cache", "--help"])
    text = capsys.readouterr().out
    usage = text.split("\n\n")[0]  # both forms, every option of the write form
    assert usage.startswith("usage: infoprobe cache [-h] [--out FILE]")
    assert "CHECKPOINT\n       infoprobe cache info FILE" in usage
    assert "[--trust-code]" in usage and "[--inputs X]" in usage
    assert "residual" in text and "re:REGEX" in text and "examples:" in text


def test_info_is_a_subcommand_with_its_own_help(capsys):
    with pytest.raises(SystemExit) as info:
        main(["cache", "info", "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: infoprobe cache info FILE")
    assert "examples:" in text and "infoprobe cache info runs/" in text
    assert "--out" not in text  # the write form's options are not the subcommand's


def test_write_form_takes_options_on_either_side_and_a_folder_named_info(
    checkpoint, tmp_path, capsys, monkeypatch
):
    documented, before = tmp_path / "documented.h5", tmp_path / "before.h5"
    assert main(cache_argv(checkpoint, documented, sites="layers")) == 0
    options = ["--n", str(N), "--cache-batch", str(BATCH), "--sites", "layers", "--quiet"]
    assert main(["cache", *options, str(checkpoint), "--out", str(before)]) == 0
    with open_cache(documented) as a, open_cache(before) as b:
        for (path, x), (_, y) in zip(a.datasets(), b.datasets(), strict=True):
            assert np.array_equal(x[()], y[()]), path
    monkeypatch.chdir(tmp_path)
    (tmp_path / "info").symlink_to(checkpoint, target_is_directory=True)
    assert main(["cache", "./info", *options, "--out", "named.h5"]) == 0
    with open_cache(tmp_path / "named.h5") as c, open_cache(documented) as a:
        assert np.array_equal(c.x[()], a.x[()])
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(["cache", str(checkpoint), "extra", "--out", "x.h5"])
    assert info.value.code == 2
    assert "unrecognized arguments: extra" in capsys.readouterr().err
    assert not (tmp_path / "x.h5").exists()


def test_cli_resumes_an_interrupted_cache_and_info_reports_it(
    checkpoint, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "acts.h5"
    original = caching.task_batch_fn

    def interrupted_after_one_batch(task, data_seed):
        batch_fn = original(task, data_seed)

        def fn(index, size):
            if index == 1:
                raise KeyboardInterrupt
            return batch_fn(index, size)

        return fn

    monkeypatch.setattr(caching, "task_batch_fn", interrupted_after_one_batch)
    with pytest.raises(KeyboardInterrupt):
        cache_checkpoint(checkpoint, out, n=N, batch_size=BATCH, sites="layers", progress=False)
    monkeypatch.undo()
    assert main(["cache", "info", str(out)]) == 0
    assert f"INCOMPLETE, {BATCH} of {N} samples" in capsys.readouterr().out
    args = ["cache", str(checkpoint), "--n", str(N), "--cache-batch", str(BATCH)]
    args += ["--sites", "layers"]
    assert main([*args, "--out", str(out), "--quiet"]) == 0
    assert f"resuming {out} at sample {BATCH} of {N}" in capsys.readouterr().out
    assert main([*args, "--out", str(tmp_path / "whole.h5"), "--quiet"]) == 0
    with open_cache(out) as resumed, open_cache(tmp_path / "whole.h5") as whole:
        pairs = zip(resumed.datasets(), whole.datasets(), strict=True)
        for (path, a), (same_path, b) in pairs:
            assert path == same_path
            np.testing.assert_array_equal(a[:], b[:])
