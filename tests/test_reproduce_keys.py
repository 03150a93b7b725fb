"""Run keys never change: every grid point of every claim and profile keeps the key, spec
and seed count recorded in tests/reproduce_keys.json, so finished result folders resume.
A point whose settings were changed on purpose (a new recipe means new runs) is marked
``changed`` there, with the reason, and holds its new key and spec.

The recorded keys and specs are fixed data, never regenerated from the code under test.
Each key is also recomputed here from its recorded spec alone, by hand (hashlib on
sorted-key JSON, the slug of the label, the fields added after the first runs dropped at
their earlier value), without the code under test.
"""

import hashlib
import json
import re
from pathlib import Path

import pytest

from infoprobe.reproduce import CLAIMS, RunStore, run_sweep
from infoprobe.reproduce.runs import RECORD_FORMAT

RECORDED = json.loads((Path(__file__).parent / "reproduce_keys.json").read_text())
assert RECORDED["format"] == "infoprobe.test.run-keys"

# Fields that runs recorded before they existed implicitly had, at that value:
# (part of the spec, task name or None for every task, field, value).
LATER_FIELDS = [
    ("model", None, "init_gain", 1.0),
    ("task", "intrinsic-dim", "distinct", False),
    ("train", None, "dtype", "float32"),
]


def recorded(claim: str, profile: str) -> list[dict]:
    return [p for p in RECORDED["points"] if (p["claim"], p["profile"]) == (claim, profile)]


def key_by_hand(label: str, spec: dict) -> str:
    spec = json.loads(json.dumps(spec))
    for part, task_name, name, value in LATER_FIELDS:
        if task_name not in (None, spec["task"]["name"]):
            continue
        where = spec["task"]["params"] if part == "task" else spec[part]
        if name in where and where[name] == value:
            del where[name]
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
    slug = "-".join(w.lower() for w in re.findall(r"[A-Za-z0-9]+", label))
    return f"{slug}-{digest[:10]}"


PROFILES = [(c, p) for c, claim in CLAIMS.items() for p in claim.profiles]


def test_every_claim_and_profile_is_recorded():
    assert sorted(PROFILES) == sorted({(p["claim"], p["profile"]) for p in RECORDED["points"]})
    assert len(RECORDED["points"]) == sum(len(CLAIMS[c].profile(p).points) for c, p in PROFILES)


@pytest.mark.parametrize("claim, profile", PROFILES)
def test_keys_specs_and_seeds_are_the_recorded_ones(claim, profile):
    prof = CLAIMS[claim].profile(profile)
    old = recorded(claim, profile)
    assert [p.label for p in prof.points] == [r["label"] for r in old]
    for point, rec in zip(prof.points, old, strict=True):
        # the exact JSON, so 1 and 1.0 or a list and a tuple would differ
        assert json.dumps(point.spec(), sort_keys=True) == json.dumps(rec["spec"], sort_keys=True)
        assert point.key == rec["key"] == key_by_hand(rec["label"], rec["spec"])
        assert (point.seeds or prof.seeds) == rec["seeds"]
    expected_ids = [f"{r['key']}-s{s}" for r in old for s in range(r["seeds"])]
    assert [spec.run_id for spec in CLAIMS[claim].runs(profile)] == expected_ids


def test_the_hand_key_sees_every_setting():
    """The hand-made key is not vacuous: any setting changed changes it."""
    rec = RECORDED["points"][0]
    base = key_by_hand(rec["label"], rec["spec"])
    for part in ("model", "train"):
        for name, value in rec["spec"][part].items():
            changed = json.loads(json.dumps(rec["spec"]))
            changed[part][name] = [value, "changed"]
            assert key_by_hand(rec["label"], changed) != base, (part, name)


class NoTraining:
    name = "none"

    def execute(self, specs, **_callbacks):
        raise AssertionError(f"{len(specs)} finished run(s) would be trained again")


@pytest.mark.parametrize("claim, profile", PROFILES)
def test_a_folder_of_recorded_runs_resumes_without_training(claim, profile, tmp_path):
    """Records named by the recorded run ids are found: the sweep skips every run."""
    store = RunStore(tmp_path)
    for rec in recorded(claim, profile):
        for seed in range(rec["seeds"]):
            run_id = f"{rec['key']}-s{seed}"
            store.run_dir(run_id).mkdir(parents=True)
            record = {
                "format": RECORD_FORMAT,
                "run_id": run_id,
                "config": rec["spec"],
                **dict.fromkeys(("best_val_nmse", "test_nmse", "best_step", "seconds")),
                "seed": seed,
                "config_key": rec["key"],
                "claim": claim,
                "train_seconds": None,
                "history": [],
                "analyses": {},
            }
            store.record_path(run_id).write_text(json.dumps(record))
            checkpoint = store.run_dir(run_id) / "checkpoint"  # what the record must match
            checkpoint.mkdir()
            metrics = dict.fromkeys(("val_nmse", "best_step", "test_nmse"))
            (checkpoint / "checkpoint.json").write_text(
                json.dumps({"metrics": metrics, "history": []})
            )
    specs = CLAIMS[claim].runs(profile)
    summary = run_sweep(specs, store, NoTraining())
    assert summary.trained == [] and len(summary.skipped) == len(specs)
    assert [r["config"] for r in store.records(specs)] == [s.point.spec() for s in specs]
