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
    /per_sample/<targets>/<probe>/<control>/<metric>  float32, the same axes (critic: pvi,
                            p_value)
    /observed/<targets>/aggregate                  bool [layer, token, position (T+1)]
    /observed/<targets>/per_sample                 bool [layer, sample, token, position (T+1)]
    /split/test_index                              int64 [sample]  (rows of the source cache)
    /roles/names                                   str [role]
    /roles/partners                                int64 [sample, role, token] (test samples)

``targets`` is ``positions`` or ``roles``; ``probe`` is ``linear``, ``mlp``, ``query`` or
``critic``;
``control`` is ``none`` (the probe itself), ``shuffled``, ``random_init``, ``conditional``
(role targets: the same probe from h(t, 0)) or ``selectivity`` (score − largest control);
``metric`` is ``r2``, ``nmse`` or ``identification`` (the critic: ``v_information``, the
mean pointwise V-information in nats, and ``share``, the share of test samples in its
per-sample sets). Decodable is not used: a score says
how well a probe of a fixed budget recovers x(s), not whether the information "is there".
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pandas as pd

from infoprobe.base.atomic import temp_name
from infoprobe.base.formats import PROBE_RESULTS
from infoprobe.base.header import (
    axes_of,
    check_header,
    label_axes,
    make_header,
    plain_attr,
    write_attrs,
)
from infoprobe.probes.errors import ResultsFileError

FORMAT = PROBE_RESULTS
SCHEMA_VERSION = 4
"""4: per-sample scores other than errors (``/per_sample/.../<metric>``, the critic's
``pvi`` and ``p_value``). 3: root attributes ``inputs_sha256`` (the source cache's inputs) and
``test_index_sha256`` (the rows of ``/split/test_index``), so a comparison can check what
the scores were computed on. 2: the common header (``created`` in UTC ``...Z``, root
``axes``) and labelled dimensions. Schema 1 and 2 files are still read (without the two
hashes; a comparison refuses them), and schema 3 files."""
ROWS_HASHED = 3
"""The first schema whose files always record ``test_index_sha256``."""
REQUIRED_ATTRS = ("T", "d", "layers", "sites", "settings", "thresholds", "provenance")
JSON_ATTRS = {"sites": list, "settings": dict, "thresholds": dict, "provenance": dict}
SCORE_AXES = {"positions": ("layer", "token", "position"), "roles": ("layer", "token", "role")}
ScoreKey = tuple[str, str, str, str]  # (targets, probe, control, metric)
SampleKey = tuple[str, str, str]  # (targets, probe, control)
ERROR = "error"
"""The leaf name of per-sample errors; other leaves are :attr:`ProbeResults.sample_scores`."""


def _header(f: h5py.File) -> None:
    """Root header (infoprobe.base.header): format, schema_version, created,
    infoprobe_version, axes (every axis name of the file's datasets, each once); call after
    writing the datasets."""
    axes: list[list[str]] = []

    def collect(_: str, item: Any) -> None:
        if isinstance(item, h5py.Dataset):
            axes.append([str(a) for a in plain_attr(item.attrs.get("axes", []))])

    f.visititems(collect)
    write_attrs(f.attrs, make_header(FORMAT, SCHEMA_VERSION, axes_of(*axes)))


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
        sample_scores: (targets, probe, control, metric) → other per-sample scores, the same
            shape (the critic's ``pvi`` and ``p_value``).
        observed: (targets, "aggregate" | "per_sample") → bool sets with a T+1 position axis.
        test_index: rows of the source cache that form the test split ``[n_test]``.
        role_names: names of the role targets ``[R]``.
        role_partners: partner index of each role ``[n_test, R, T+1]`` (test samples).
        settings, thresholds, provenance, control_provenance: JSON-able dicts.
        inputs_sha256: hash of the source cache's inputs (None in older files).
    """

    T: int
    d: int
    layers: list[int]
    sites: list[str]
    scores: dict[ScoreKey, np.ndarray] = field(default_factory=dict)
    per_sample: dict[SampleKey, np.ndarray] = field(default_factory=dict)
    sample_scores: dict[ScoreKey, np.ndarray] = field(default_factory=dict)
    observed: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    test_index: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    role_names: list[str] = field(default_factory=list)
    role_partners: np.ndarray | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    thresholds: dict[str, float] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    control_provenance: dict[str, Any] | None = None
    inputs_sha256: str | None = None
    """SHA-256 of the source cache's inputs ``/inputs/x`` (all rows, float32 bytes); None
    in files of schema 1 and 2."""

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
        if self.inputs_sha256 is not None:
            f.attrs["inputs_sha256"] = self.inputs_sha256
        f.attrs["test_index_sha256"] = rows_sha256(self.test_index)
        for (targets, probe, control, metric), arr in self.scores.items():
            ds = f.create_dataset(f"scores/{targets}/{probe}/{control}/{metric}", data=arr)
            label_axes(ds, list(SCORE_AXES[targets]))
        for (targets, probe, control, metric), arr in self._sample_arrays():
            ds = f.create_dataset(
                f"per_sample/{targets}/{probe}/{control}/{metric}",
                data=arr.astype(np.float32),
                chunks=True,
            )
            axes = SCORE_AXES[targets]
            label_axes(ds, [axes[0], "sample", axes[1], axes[2]])
        for (targets, kind), arr in self.observed.items():
            ds = f.create_dataset(f"observed/{targets}/{kind}", data=arr.astype(bool))
            base = ["layer", "token", "position"]
            label_axes(ds, base if kind == "aggregate" else ["layer", "sample", *base[1:]])
        ds = f.create_dataset("split/test_index", data=np.asarray(self.test_index, np.int64))
        label_axes(ds, ["sample"])
        ds = f.create_dataset(
            "roles/names", data=np.asarray(self.role_names, dtype=object), dtype=h5py.string_dtype()
        )
        label_axes(ds, ["role"])
        if self.role_partners is not None:
            ds = f.create_dataset("roles/partners", data=self.role_partners.astype(np.int64))
            label_axes(ds, ["sample", "role", "token"])
        _header(f)

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> ProbeResults:
        """Read a results file written by :meth:`write`, validating every field it reads
        (ResultsFileError names the file, the field, what was expected and found)."""
        p = Path(path)
        if not p.exists():
            raise ResultsFileError(f"{p}: no such results file")
        try:
            f = h5py.File(p, "r")
        except OSError as exc:
            raise ResultsFileError(f"{p}: not an HDF5 file ({exc})") from exc
        with f:
            if "schema_version" not in f.attrs or "scores" not in f:
                raise ResultsFileError(
                    f"{p}: attribute 'schema_version' and group '/scores' expected "
                    "(an infoprobe results file), not found"
                )
            version = check_header(f.attrs, p, fmt=FORMAT, readable=range(1, SCHEMA_VERSION + 1),
                                   error=ResultsFileError, what="root attribute")  # fmt: skip
            res = _read_fields(f, p, version)
        res.check_shapes(p)
        return res

    def check_shapes(self, where: str | os.PathLike[str] = "probe results") -> None:
        """Refuse arrays whose shapes do not fit T, the layers and the test split."""
        n_layer_axis, T, n_test = len(self.layers), self.T, len(self.test_index)
        width = {"positions": T, "roles": len(self.role_names)}
        for (targets, probe, control, metric), arr in self.scores.items():
            want = (n_layer_axis, T + 1, width.get(targets, -1))
            _check_shape(where, f"/scores/{targets}/{probe}/{control}/{metric}", arr, want)
        for (targets, probe, control, metric), arr in self._sample_arrays():
            want = (n_layer_axis, n_test, T + 1, width.get(targets, -1))
            _check_shape(where, f"/per_sample/{targets}/{probe}/{control}/{metric}", arr, want)
        for (targets, kind), arr in self.observed.items():
            want = (n_layer_axis, T + 1, T + 1)
            if kind == "per_sample":
                want = (n_layer_axis, n_test, T + 1, T + 1)
            _check_shape(where, f"/observed/{targets}/{kind}", arr, want)
        if self.role_partners is not None:
            want = (n_test, len(self.role_names), T + 1)
            _check_shape(where, "/roles/partners", self.role_partners, want)

    def _sample_arrays(self) -> list[tuple[ScoreKey, np.ndarray]]:
        """Every per-sample array under its (targets, probe, control, metric) key."""
        errors = [((*key, ERROR), arr) for key, arr in self.per_sample.items()]
        return errors + list(self.sample_scores.items())

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


def rows_sha256(rows: np.ndarray) -> str:
    """SHA-256 of sample rows as contiguous little-endian int64 bytes."""
    return hashlib.sha256(np.ascontiguousarray(rows, dtype="<i8").tobytes()).hexdigest()


def _json_attr(f: h5py.File, p: Path, name: str, kind: type | None) -> Any:
    text = plain_attr(f.attrs[name])
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except json.JSONDecodeError:
        value = None
    if kind is None and text == "null":
        return None
    if not isinstance(value, kind or dict):
        shown = repr(text) if len(repr(text)) <= 60 else repr(text)[:57] + "..."
        expected = {dict: "a JSON object", list: "a JSON list"}.get(kind, "a JSON object or null")
        raise ResultsFileError(f"{p}: attribute {name!r} is {shown}, expected {expected}")
    return value


def _int_list(value: Any) -> list[int] | None:
    items = np.asarray(value).reshape(-1)
    if items.dtype.kind not in "iu":
        return None
    return [int(v) for v in items]


def _read_fields(f: h5py.File, p: Path, version: int) -> ProbeResults:
    """Every field of an open results file, each checked for presence and type."""
    missing = [a for a in REQUIRED_ATTRS if a not in f.attrs]
    missing += [f"/{d}" for d in ("split/test_index", "roles/names") if d not in f]
    if missing:
        raise ResultsFileError(f"{p}: missing {missing} (damaged file); re-run `infoprobe probe`")
    sizes = {a: plain_attr(f.attrs[a]) for a in ("T", "d")}
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ResultsFileError(
                f"{p}: attribute {name!r} is {value!r}, expected an integer >= 1"
            )
    layers = _int_list(f.attrs["layers"])
    if not layers:
        raise ResultsFileError(
            f"{p}: attribute 'layers' is {f.attrs['layers']!r}, expected a list of layer indices"
        )
    meta = {name: _json_attr(f, p, name, kind) for name, kind in JSON_ATTRS.items()}
    control = None
    if "control_provenance" in f.attrs:
        control = _json_attr(f, p, "control_provenance", None)
    test_index = f["split/test_index"][()]
    if test_index.ndim != 1 or test_index.dtype.kind not in "iu" or (test_index < 0).any():
        raise ResultsFileError(
            f"{p}: dataset /split/test_index is {test_index.dtype} {list(test_index.shape)}, "
            "expected int64 [sample] of cache rows >= 0"
        )
    recorded = plain_attr(f.attrs.get("test_index_sha256"))
    if recorded is None and version >= ROWS_HASHED:  # a missing hash is a mismatch
        raise ResultsFileError(
            f"{p}: attribute 'test_index_sha256' is missing (a file of schema {version} always "
            "has it: the rows the scores were computed on): the file was edited; re-run "
            "`infoprobe probe`"
        )
    if recorded is not None and recorded != rows_sha256(test_index):
        raise ResultsFileError(
            f"{p}: dataset /split/test_index does not match attribute 'test_index_sha256' (the "
            "rows the scores were computed on): the file was edited; re-run `infoprobe probe`"
        )
    inputs = plain_attr(f.attrs.get("inputs_sha256"))
    if inputs is not None and not isinstance(inputs, str):
        raise ResultsFileError(f"{p}: attribute 'inputs_sha256' is {inputs!r}, expected hex text")
    names = [s.decode() if isinstance(s, bytes) else str(s) for s in f["roles/names"][()]]
    res = ProbeResults(
        T=sizes["T"],
        d=sizes["d"],
        layers=layers,
        test_index=test_index.astype(np.int64),
        role_names=names,
        role_partners=f["roles/partners"][()] if "roles/partners" in f else None,
        control_provenance=control,
        inputs_sha256=inputs,
        **meta,
    )
    _walk(f["scores"], 4, lambda key, ds: res.scores.__setitem__(key, ds[()]))
    if "per_sample" in f:
        _walk(f["per_sample"], 4, lambda key, ds: _put_sample(res, key, ds[()]))
    if "observed" in f:
        _walk(f["observed"], 2, lambda key, ds: res.observed.__setitem__(key, ds[()]))
    return res


def _put_sample(res: ProbeResults, key: tuple[str, ...], values: np.ndarray) -> None:
    """File leaf ``key`` (targets, probe, control, metric) into errors or other scores."""
    if key[3] == ERROR:
        res.per_sample[key[:3]] = values
    else:
        res.sample_scores[key] = values


def _check_shape(where: Any, name: str, arr: np.ndarray, want: tuple[int, ...]) -> None:
    if tuple(arr.shape) != want:
        raise ResultsFileError(
            f"{where}: dataset {name} has shape {list(arr.shape)}, expected {list(want)} "
            "(layers, test samples, T+1 tokens, positions or roles); re-run `infoprobe probe`"
        )


def _walk(group: h5py.Group, depth: int, visit: Any, prefix: tuple[str, ...] = ()) -> None:
    """Call ``visit(key_tuple, dataset)`` for each dataset ``depth`` levels below ``group``."""
    for name, item in group.items():
        key = (*prefix, name)
        if isinstance(item, h5py.Dataset):
            if len(key) == depth:
                visit(key, item)
        else:
            _walk(item, depth, visit, key)
