"""The ``format`` name of every file and folder infoprobe writes, in one place: each
module that writes one reads its name from here (as its ``FORMAT``), so code that only
needs to recognise a file (a run folder's stages, a cleanup that removes only infoprobe's
own files) need not load the module that writes it."""

CACHE = "infoprobe.activation-cache"
CHECKPOINT = "infoprobe.checkpoint"
COMPARISON = "infoprobe.comparison"
INFLUENCE = "infoprobe.influence"
PREDICTED_SETS = "infoprobe.predicted-sets"
PROBE_RESULTS = "infoprobe.probe-results"
REPORT = "infoprobe.report"
RUN = "infoprobe.run"
SEEDS = "infoprobe.seeds"
SEED_ANALYSIS = "infoprobe.seed-analysis"
SPREAD = "infoprobe.spread"
TRAIN_STATE = "infoprobe.train-state"
