"""MSRL chart-to-code rewards: textual, visual and execution (spec F item 4).

R = w_t * R_text + w_v * R_vis + w_e * R_exec, with a two-stage curriculum
(stage 1: w_v = 0; stage 2: w_v > 0, spec F item 5). One module per job:

* `normalize`: code extraction and the AST normaliser (`normalize_code`).
* `fields`: field extractors, matchers and R_text.
* `judges`: visual judges (`JUDGES`; default "ssim" via scikit-image).
* `reward`: R_exec, R_vis, the weighted reward and the curriculum.

The public names of all four are re-exported here, so `chart.X` works.
"""

from jaxlab.rewards.chart.fields import TEXT_DIMENSIONS
from jaxlab.rewards.chart.fields import edit_similarity
from jaxlab.rewards.chart.fields import exact_f1
from jaxlab.rewards.chart.fields import extract_chart_types
from jaxlab.rewards.chart.fields import extract_colors
from jaxlab.rewards.chart.fields import extract_data_values
from jaxlab.rewards.chart.fields import extract_layout
from jaxlab.rewards.chart.fields import extract_text
from jaxlab.rewards.chart.fields import levenshtein
from jaxlab.rewards.chart.fields import numeric_soft_f1
from jaxlab.rewards.chart.fields import text_reward
from jaxlab.rewards.chart.fields import text_reward_fields
from jaxlab.rewards.chart.fields import text_score
from jaxlab.rewards.chart.judges import JUDGES
from jaxlab.rewards.chart.judges import Judge
from jaxlab.rewards.chart.judges import get_judge
from jaxlab.rewards.chart.judges import histogram_judge
from jaxlab.rewards.chart.judges import pixel_mse_judge
from jaxlab.rewards.chart.judges import register_judge
from jaxlab.rewards.chart.judges import ssim
from jaxlab.rewards.chart.judges import ssim_judge
from jaxlab.rewards.chart.normalize import PLOT_METHODS
from jaxlab.rewards.chart.normalize import UNKNOWN
from jaxlab.rewards.chart.normalize import AxesRef
from jaxlab.rewards.chart.normalize import PlotCall
from jaxlab.rewards.chart.normalize import extract_code
from jaxlab.rewards.chart.normalize import normalize_code
from jaxlab.rewards.chart.reward import ChartRewardConfig
from jaxlab.rewards.chart.reward import CurriculumConfig
from jaxlab.rewards.chart.reward import CurriculumStage
from jaxlab.rewards.chart.reward import chart_group_reward
from jaxlab.rewards.chart.reward import chart_reward
from jaxlab.rewards.chart.reward import exec_reward
from jaxlab.rewards.chart.reward import stage_for_step
from jaxlab.rewards.chart.reward import visual_reward
from jaxlab.rewards.chart.reward import weighted_reward

__all__ = [
    "AxesRef", "ChartRewardConfig", "CurriculumConfig", "CurriculumStage",
    "JUDGES", "Judge", "PLOT_METHODS", "PlotCall", "TEXT_DIMENSIONS",
    "UNKNOWN", "chart_group_reward", "chart_reward", "edit_similarity",
    "exact_f1", "exec_reward", "extract_chart_types", "extract_colors",
    "extract_code", "extract_data_values", "extract_layout", "extract_text",
    "get_judge", "histogram_judge", "levenshtein", "normalize_code",
    "numeric_soft_f1", "pixel_mse_judge", "register_judge", "ssim",
    "ssim_judge", "stage_for_step", "text_reward", "text_reward_fields",
    "text_score", "visual_reward", "weighted_reward",
]
