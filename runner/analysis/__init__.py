"""Statistics over the result store: every number a report shows is computed here.

`frame`: the long frame, one row per repeat (params, metrics, how each precision ran).
`identity`: a cell is its key and its machine, not its name: each name shows its newest definition unless pooled on
purpose. `sides`: which repeats form a side (one machine's, unless a comparison names machines), for every command.
`stats`: per-cell n, mean, std, CV, min, max, median and a t confidence interval; the precision summary
and the quality flags. `compare`: pair two sides' cells, Welch's test plus a minimum effect size, the
geometric mean. `scaling`: throughput against the process layout. Statuses other than ok are counted,
never dropped.
"""

from runner.analysis.comparable import OutcomeChange, Outcomes, outcome_change, why_not
from runner.analysis.compare import (
    Comparison,
    Side,
    compare,
    geometric_mean,
    pair_cells,
    select_side,
    side_stats,
)
from runner.analysis.frame import (
    BASELINE_PRECISION,
    CELL_KEYS,
    CORE_PARAMS,
    ENV_FIELDS,
    MEASURE_COLUMNS,
    PARAM_KEYS,
    PRECISION_ORDER,
    RECIPE_COLUMNS,
    RUN_SETTINGS,
    STAT_NAMES,
    environment_rank,
    frame,
    frame_columns,
    latest,
    options_label,
    precision_index,
    precision_rank,
    settings_text,
)
from runner.analysis.identity import DEFINITION_COLUMNS, Definitions, choose
from runner.analysis.pairing import MIN_EFFECT, change_words, judge_pair, pair_stats
from runner.analysis.recipes import DASH_WORD, RECIPE_FIELDS, recipe, recipe_text
from runner.analysis.scaling import scaling
from runner.analysis.sidefacts import (
    environment_info,
    precision_ratios,
    precision_recipes,
    recipe_differences,
)
from runner.analysis.sides import SIDE_KINDS, Machine, Provenance, Selection, available_sides, select
from runner.analysis.significance import ALPHA, CONFIDENCE, t_half_width, welch_from_stats
from runner.analysis.stats import (
    DATA_BOUND,
    MEASURE_SUMMARY_COLUMNS,
    NOISY_CV,
    Stats,
    cell_attributes,
    describe,
    measurement,
    metric_stats,
    positive,
    precision_summary,
    quality_flags,
    status_summary,
    summarize,
)
from runner.record.metrics import (
    METRIC_ALIASES,
    METRICS,
    Metric,
    definition,
    figures,
    get_metric,
    metric_heading,
    shown_unit,
)
from runner.record.repeat import Repeat, admitted
from runner.record.stored import Origin, StoredRepeat, admission_of

__all__ = [
    "ALPHA", "BASELINE_PRECISION", "CELL_KEYS", "CONFIDENCE", "CORE_PARAMS", "DASH_WORD", "DATA_BOUND",
    "DEFINITION_COLUMNS", "admission_of", "figures", "admitted", "definition", "metric_heading", "shown_unit",
    "ENV_FIELDS", "frame_columns", "MEASURE_COLUMNS", "Origin", "Repeat", "StoredRepeat", "MEASURE_SUMMARY_COLUMNS", "METRICS", "METRIC_ALIASES", "MIN_EFFECT", "NOISY_CV",
    "PARAM_KEYS", "PRECISION_ORDER", "RECIPE_COLUMNS", "RECIPE_FIELDS", "RUN_SETTINGS", "SIDE_KINDS",
    "STAT_NAMES", "Comparison", "Definitions", "Metric", "Side", "Stats", "available_sides", "cell_attributes",
    "change_words", "choose", "compare", "describe", "environment_info", "environment_rank", "frame",
    "geometric_mean", "get_metric", "judge_pair", "latest", "measurement", "metric_stats",
    "options_label", "pair_cells", "pair_stats", "precision_index", "precision_rank", "precision_ratios",
    "precision_recipes", "precision_summary", "quality_flags", "recipe", "recipe_differences", "recipe_text",
    "positive", "scaling", "select_side", "settings_text", "side_stats", "status_summary", "summarize", "t_half_width",
    "welch_from_stats", "Outcomes", "OutcomeChange", "outcome_change", "why_not", "Machine", "Provenance",
    "Selection", "select",
]
