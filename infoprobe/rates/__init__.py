"""Measure InfoFlow's rates: fit log NMSE against log parameters over a capacity sweep.

    from infoprobe.rates import fit_rates, format_rates, load_records

    records = load_records(["reproduce/cost-law/quick/results.json"])     table =
fit_rates(records)  # one fit per (task, T, arch), slope ratios per (task, T)
print(format_rates(table))

The law: P ~ eps^-alpha parameters; with NMSE ~ eps^2 the predicted slope of log NMSE on
log P is -2/alpha, and the ratio of two architectures' slopes is the inverse ratio of
their alphas whatever that convention (docs/rates.md).
"""

from infoprobe.rates.figures import rate_figure, rate_figures
from infoprobe.rates.fit import (
    DID_NOT_TRAIN_NMSE,
    MIN_WIDTHS,
    NMSE_POWER,
    RateError,
    RateRecord,
    SlopeFit,
    SlopeRatio,
    exclusion,
    fit_slope,
    slope_ratio,
)
from infoprobe.rates.params import parameter_counts
from infoprobe.rates.records import load_records, records_file, records_from_results
from infoprobe.rates.table import RateTable, fit_rates, format_rates

__all__ = [
    "DID_NOT_TRAIN_NMSE",
    "MIN_WIDTHS",
    "NMSE_POWER",
    "RateError",
    "RateRecord",
    "RateTable",
    "SlopeFit",
    "SlopeRatio",
    "exclusion",
    "fit_rates",
    "fit_slope",
    "format_rates",
    "load_records",
    "parameter_counts",
    "rate_figure",
    "rate_figures",
    "records_file",
    "records_from_results",
    "slope_ratio",
]
