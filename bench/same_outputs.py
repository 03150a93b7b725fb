"""Are the project's outputs the same before and after a change? A content digest of every
file a fixed set of small commands writes (train, cache, probe, flow, compare, report,
predict, influence, a batched ensemble), on fixed seeds.

    python bench/same_outputs.py record digests.json   # on the old code
    python bench/same_outputs.py check digests.json    # on the new code: lists what differs

What is compared: every HDF5 dataset's dtype, shape and bytes and every attribute; every
JSON value; the bytes of every other file. What is ignored, since it differs between two
runs of the same code: header timestamps (``created``, ISO 8601), the run folder's path,
stage wall times (``seconds``) and the SHA-256 identities of files that themselves hold a
timestamp (the files are compared directly instead). The last line says how many files
differ (0 = identical).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np

TIMESTAMP = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
SHA = re.compile(rb"\b[0-9a-f]{64}\b")
SECONDS = re.compile(rb"(\"|&quot;)seconds(\"|&quot;): [0-9.e+-]+")
TINY = ["--steps", "200", "--n-train", "512", "--n-val", "128", "--n-test", "128"]
THREADS = ["--threads", "1"]


def commands(out: Path) -> list[list[str]]:
    """The fixed commands, each writing under ``out``."""
    run = out / "run"
    return [
        ["run", "--task", "intrinsic-dim", "--T", "8", "--E", "16", "--heads", "2,2",
         *TINY, *THREADS, "--n-cache", "256", "--seed", "0", "--quiet", "--out", str(run)],
        ["predict", "--task", "intrinsic-dim", "--T", "8", "--E", "16", "--heads", "1,2",
         "--samples", "64", "--out", str(out / "pred.h5"), "--quiet"],
        ["influence", str(run / "checkpoint"), "--cache", str(run / "acts.h5"),
         "--n", "32", "--out", str(out / "influence.h5"), "--quiet"],
        ["train", "--task", "aggregate-decode", "--T", "8", "--E", "8", "--heads", "1",
         "--d-mlp", "0", *TINY, *THREADS, "--seeds", "0,1", "--quiet",
         "--out", str(out / "ensemble")],
    ]  # fmt: skip


def normalise(data: bytes, out: Path) -> bytes:
    """``data`` with what differs between two runs of the same code replaced."""
    data = data.replace(str(out).encode(), b"<OUT>")
    data = TIMESTAMP.sub(b"<created>", data)
    data = SECONDS.sub(rb"\1seconds\2: <s>", data)
    return SHA.sub(b"<sha256>", data)


def h5_digest(path: Path, out: Path) -> str:
    """SHA-256 over every group's and dataset's name, attributes and data."""
    h = hashlib.sha256()

    def value_bytes(value) -> None:
        array = np.asarray(value)
        if array.dtype.kind in "OSU":  # strings (object arrays hold pointers, not text)
            h.update(normalise(repr(array.tolist()).encode(), out))
        else:
            h.update(f"{array.dtype}{array.shape}".encode())
            h.update(np.ascontiguousarray(array).tobytes())

    def attrs(obj) -> None:
        for key in sorted(obj.attrs):
            h.update(key.encode())
            value_bytes(obj.attrs[key])

    with h5py.File(path, "r") as f:
        attrs(f)

        def visit(name, obj) -> None:
            h.update(name.encode())
            attrs(obj)
            if isinstance(obj, h5py.Dataset):
                value_bytes(obj[()])

        f.visititems(visit)
    return h.hexdigest()


def digest(path: Path, out: Path) -> str:
    if path.suffix == ".h5":
        return h5_digest(path, out)
    data = path.read_bytes()
    if path.suffix in (".json", ".html", ".txt", ".md", ".csv"):
        data = normalise(data, out)
    return hashlib.sha256(data).hexdigest()


def produce() -> dict[str, str]:
    """Run every command in a fresh folder; the digest of each file written."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for argv in commands(out):
            print("infoprobe", " ".join(argv), flush=True)
            subprocess.run([sys.executable, "-m", "infoprobe", *argv], check=True)
        return {
            str(p.relative_to(out)): digest(p, out) for p in sorted(out.rglob("*")) if p.is_file()
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("record", "check"))
    parser.add_argument("digests", type=Path, help="JSON file of digests")
    args = parser.parse_args()
    found = produce()
    if args.mode == "record":
        args.digests.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
        print(f"recorded {len(found)} files in {args.digests}")
        return
    expected = json.loads(args.digests.read_text())
    differ = sorted(k for k in expected.keys() | found.keys() if expected.get(k) != found.get(k))
    for name in differ:
        state = "missing" if name not in found else "new" if name not in expected else "differs"
        print(f"  {state}: {name}")
    print(f"{len(differ)} of {len(expected.keys() | found.keys())} files differ")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
