"""Measure InfoFlow's rates: fit log NMSE against log parameters over a capacity sweep.

    from infoprobe.rates import fit_rates, format_rates, load_records

    records = load_records(["reproduce/cost-law/quick/results.json"])     table =
fit_rates(records)  # one fit per (task, T, arch), slope ratios per (task, T)
print(format_rates(table))

The law: P ~ eps^-alpha parameters; with NMSE ~ eps^2 the predicted slope of log NMSE on
log P is -2/alpha, and the ratio of two architectures' slopes is the inverse ratio of
their alphas whatever that convention (docs/rates.md).
"""

from infoprobe.base.lazy import lazy_exports

_EXPORTS = {
    "rate_figure": "infoprobe.rates.figures",
    "rate_figures": "infoprobe.rates.figures",
    "DID_NOT_TRAIN_NMSE": "infoprobe.rates.fit",
    "MIN_WIDTHS": "infoprobe.rates.fit",
    "NMSE_POWER": "infoprobe.rates.fit",
    "RateError": "infoprobe.rates.fit",
    "RateRecord": "infoprobe.rates.fit",
    "SlopeFit": "infoprobe.rates.fit",
    "SlopeRatio": "infoprobe.rates.fit",
    "exclusion": "infoprobe.rates.fit",
    "fit_slope": "infoprobe.rates.fit",
    "slope_ratio": "infoprobe.rates.fit",
    "parameter_counts": "infoprobe.rates.params",
    "load_records": "infoprobe.rates.records",
    "records_file": "infoprobe.rates.records",
    "records_from_results": "infoprobe.rates.records",
    "RateTable": "infoprobe.rates.table",
    "fit_rates": "infoprobe.rates.table",
    "format_rates": "infoprobe.rates.table",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
