"""Probe results: arrays indexed [layer, token, position], an HDF5 file, a tidy table.

File layout (``h5dump -H probes.h5`` shows all of it; every dataset has an ``axes``
attribute naming its axes)::

    /                       attrs: format ("infoprobe.probe-results"), schema_version,
                            created, infoprobe_version, axes (the header of
                            docs/conventions.md), T, d,
                            layers, sites, settings (JSON), thresholds (JSON),
                            provenance (JSON: the source cache's), control_provenance (JSON)
    /scores/<targets>/<probe>/<control>/<metric>   float64 [layer, token, position|role]
    /per_sample/<targets>/<probe>/<control>/error  float32 [layer, sample, token, position|role]
    /observed/<targets>/aggregate                  bool [layer, token, position (T+1)]
    /observed/<targets>/per_sample                 bool [layer, sample, token, position (T+1)]
    /split/test_index                              int64 [sample]  (rows of the source cache)
    /roles/names                                   str [role]
    /roles/partners                                int64 [sample, role, token] (test samples)

``targets`` is ``positions`` or ``roles``; ``probe`` is ``linear``, ``mlp`` or ``query``;
``control`` is ``none`` (the probe itself), ``shuffled``, ``random_init``, ``conditional``
(role targets: the same probe from h(t, 0)) or ``selectivity`` (score − largest control);
``metric`` is ``r2``, ``nmse`` or ``identification``. Decodable is not used: a score says
how well a probe of a fixed budget recovers x(s), not whether the information "is there".
"""

from __future__ import annotations

import io
import json
import os
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pandas as pd

from infoprobe.atomic import temp_name
from infoprobe.probes.errors import ResultsFileError

FORMAT = "infoprobe.probe-results"
SCHEMA_VERSION = 2
"""2: the common header (``created`` in UTC ``...Z``, root ``axes``) and labelled dimensions;
schema 1 files differ only there and are still read."""
SCORE_AXES = {"positions": ("layer", "token", "position"), "roles": ("layer", "token", "role")}
ScoreKey = tuple[str, str, str, str]  # (targets, probe, control, metric)
SampleKey = tuple[str, str, str]  # (targets, probe, control)


# This leaf's own small header helper (a leaf imports nothing from the hub nor from the
# other leaves); it writes the fields infoprobe.header writes for the hub's files.
def _package_version() -> str:
    try:
        return metadata.version("infoprobe")
    except metadata.PackageNotFoundError:
        return "unknown"


def _label_axes(ds: h5py.Dataset, axes: list[str]) -> None:
    """The dataset's ``axes`` attribute and HDF5 dimension labels."""
    ds.attrs["axes"] = list(axes)
    for i, name in enumerate(axes):
        ds.dims[i].label = name


def _header(f: h5py.File) -> None:
    """Root header: format, schema_version, created, infoprobe_version, axes (every axis
    name of the file's datasets, each once); call after writing the datasets."""
    names: dict[str, None] = {}

    def collect(_: str, item: Any) -> None:
        if isinstance(item, h5py.Dataset):
            names.update(dict.fromkeys(str(a) for a in item.attrs.get("axes", [])))

    f.visititems(collect)
    f.attrs["format"] = FORMAT
    f.attrs["schema_version"] = SCHEMA_VERSION
    f.attrs["created"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    f.attrs["infoprobe_version"] = _package_version()
    f.attrs["axes"] = [str(a) for a in names]


@dataclass
class ProbeResults:
    """All scores of one probing run.

    Attributes:
        T: data tokens; the token axis has T+1 entries (CLS = T), the position axis T.
        d: input dimension.
        layers: layer indices (0 = embedding, k = after block k-1).
        sites: hook name of each layer.
        scores: (targets, probe, control, metric) → ``[L+1, T+1, S]`` float64.
        per_sample: (targets, probe, control) → normalised errors ``[L+1, n_test, T+1, S]``.
        observed: (targets, "aggregate" | "per_sample") → bool sets with a T+1 position axis.
        test_index: rows of the source cache that form the test split ``[n_test]``.
        role_names: names of the role targets ``[R]``.
        role_partners: partner index of each role ``[n_test, R, T+1]`` (test samples).
        settings, thresholds, provenance, control_provenance: JSON-able dicts.
    """

    T: int
    d: int
    layers: list[int]
    sites: list[str]
    scores: dict[ScoreKey, np.ndarray] = field(default_factory=dict)
    per_sample: dict[SampleKey, np.ndarray] = field(default_factory=dict)
    observed: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    test_index: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    role_names: list[str] = field(default_factory=list)
    role_partners: np.ndarray | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    thresholds: dict[str, float] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    control_provenance: dict[str, Any] | None = None

    def score(
        self,
        metric: str = "r2",
        targets: str = "positions",
        probe: str = "linear",
        control: str = "none",
    ) -> np.ndarray:
        """One score array ``[L+1, T+1, S]``; raises KeyError listing what is present."""
        key = (targets, probe, control, metric)
        if key not in self.scores:
            raise KeyError(f"no scores for {key}; present: {sorted(self.scores)}")
        return self.scores[key]

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write to ``path`` via ``path.tmp-<pid>`` and an atomic rename."""
        final = Path(path)
        tmp = temp_name(final)
        # The file is built in memory and written with one plain write: HDF5 cannot
        # recover from a failed write of its own (a full disk leaves its file objects
        # broken and the interpreter crashes at exit), a plain write raises OSError.
        image = io.BytesIO()
        with h5py.File(image, "w") as f:
            self._write_to(f)
        try:
            with open(tmp, "wb") as out:
                out.write(image.getbuffer())
            os.replace(tmp, final)
        except OSError as err:
            size = image.getbuffer().nbytes / 1e6
            message = f"{err.strerror} (writing {size:.1f} MB of probe results)"
            raise OSError(err.errno, message, str(final)) from err
        finally:
            if tmp.exists():
                tmp.unlink()
        return final

    def _write_to(self, f: h5py.File) -> None:
        f.attrs["T"] = self.T
        f.attrs["d"] = self.d
        f.attrs["layers"] = np.asarray(self.layers, dtype=np.int64)
        f.attrs["sites"] = json.dumps(self.sites)
        f.attrs["settings"] = json.dumps(self.settings)
        f.attrs["thresholds"] = json.dumps(self.thresholds)
        f.attrs["provenance"] = json.dumps(self.provenance, default=str)
        f.attrs["control_provenance"] = json.dumps(self.control_provenance, default=str)
        for (targets, probe, control, metric), arr in self.scores.items():
            ds = f.create_dataset(f"scores/{targets}/{probe}/{control}/{metric}", data=arr)
            _label_axes(ds, list(SCORE_AXES[targets]))
        for (targets, probe, control), arr in self.per_sample.items():
            ds = f.create_dataset(
                f"per_sample/{targets}/{probe}/{control}/error",
                data=arr.astype(np.float32),
                chunks=True,
            )
            axes = SCORE_AXES[targets]
            _label_axes(ds, [axes[0], "sample", axes[1], axes[2]])
        for (targets, kind), arr in self.observed.items():
            ds = f.create_dataset(f"observed/{targets}/{kind}", data=arr.astype(bool))
            base = ["layer", "token", "position"]
            _label_axes(ds, base if kind == "aggregate" else ["layer", "sample", *base[1:]])
        ds = f.create_dataset("split/test_index", data=np.asarray(self.test_index, np.int64))
        _label_axes(ds, ["sample"])
        ds = f.create_dataset(
            "roles/names", data=np.asarray(self.role_names, dtype=object), dtype=h5py.string_dtype()
        )
        _label_axes(ds, ["role"])
        if self.role_partners is not None:
            ds = f.create_dataset("roles/partners", data=self.role_partners.astype(np.int64))
            _label_axes(ds, ["sample", "role", "token"])
        _header(f)

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> ProbeResults:
        """Read a results file written by :meth:`write`."""
        p = Path(path)
        if not p.exists():
            raise ResultsFileError(f"{p}: no such results file")
        try:
            f = h5py.File(p, "r")
        except OSError as exc:
            raise ResultsFileError(f"{p}: not an HDF5 file ({exc})") from exc
        with f:
            version = f.attrs.get("schema_version")
            if version is None or "scores" not in f:
                raise ResultsFileError(
                    f"{p}: attribute 'schema_version' and group '/scores' expected "
                    "(an infoprobe results file), not found"
                )
            version = version.item() if isinstance(version, np.generic) else version
            if not isinstance(version, int) or not 1 <= version <= SCHEMA_VERSION:
                newer = isinstance(version, int) and version > SCHEMA_VERSION
                raise ResultsFileError(
                    f"{p}: attribute 'schema_version' expected an integer 1..{SCHEMA_VERSION}, "
                    f"got {version!r}" + ("; upgrade infoprobe" if newer else "")
                )
            if f.attrs.get("format") != FORMAT:
                raise ResultsFileError(
                    f"{p}: attribute 'format' expected {FORMAT!r}, got {f.attrs.get('format')!r}"
                )
            res = cls(
                T=int(f.attrs["T"]),
                d=int(f.attrs["d"]),
                layers=[int(v) for v in f.attrs["layers"]],
                sites=json.loads(f.attrs["sites"]),
                settings=json.loads(f.attrs["settings"]),
                thresholds=json.loads(f.attrs["thresholds"]),
                provenance=json.loads(f.attrs["provenance"]),
                control_provenance=json.loads(f.attrs["control_provenance"]),
                test_index=f["split/test_index"][()],
                role_names=[
                    s.decode() if isinstance(s, bytes) else s for s in f["roles/names"][()]
                ],
                role_partners=f["roles/partners"][()] if "roles/partners" in f else None,
            )
            _walk(f["scores"], 4, lambda key, ds: res.scores.__setitem__(key, ds[()]))
            if "per_sample" in f:
                _walk(
                    f["per_sample"], 4, lambda key, ds: res.per_sample.__setitem__(key[:3], ds[()])
                )
            if "observed" in f:
                _walk(f["observed"], 2, lambda key, ds: res.observed.__setitem__(key, ds[()]))
        return res

    def to_dataframe(self) -> pd.DataFrame:
        """Tidy table of every aggregate score.

        Columns: ``layer, t, s, probe, metric, value, control, targets, role``; ``s`` is the
        position (positions) or the role index (roles, whose name is in ``role``).
        ``control`` is ``none`` for the probe's own score.
        """
        frames = []
        for (targets, probe, control, metric), arr in sorted(self.scores.items()):
            n_layer, n_tok, n_s = arr.shape
            layer, tok, s = np.meshgrid(
                np.asarray(self.layers)[:n_layer],
                np.arange(n_tok),
                np.arange(n_s),
                indexing="ij",
            )
            names = np.asarray(self.role_names, dtype=object)
            role = names[s.ravel()] if targets == "roles" else np.full(s.size, "", object)
            frames.append(
                pd.DataFrame(
                    {
                        "layer": layer.ravel(),
                        "t": tok.ravel(),
                        "s": s.ravel(),
                        "probe": probe,
                        "metric": metric,
                        "value": arr.ravel(),
                        "control": control,
                        "targets": targets,
                        "role": role,
                    }
                )
            )
        columns = ["layer", "t", "s", "probe", "metric", "value", "control", "targets", "role"]
        if not frames:
            return pd.DataFrame(columns=columns)
        return pd.concat(frames, ignore_index=True)[columns]


def _walk(group: h5py.Group, depth: int, visit: Any, prefix: tuple[str, ...] = ()) -> None:
    """Call ``visit(key_tuple, dataset)`` for each dataset ``depth`` levels below ``group``."""
    for name, item in group.items():
        key = (*prefix, name)
        if isinstance(item, h5py.Dataset):
            if len(key) == depth:
                visit(key, item)
        else:
            _walk(item, depth, visit, key)
