"""VideoReasonBench (paper R): procedural videos, questions and solvers.

Engines (`DEMOS`): number (sliding puzzle), circle (lights-out), cup
(swaps), file (terminal commands), card and chip (synthetic stand-ins of the
paper's recordings). Six skills at three levels (`SKILLS`, `LEVELS`).

    videos = generate(["number", "cup"], num_ops=range(5, 8), seed=0)
    recs = records(videos)                    # the paper's JSON records
    responses = solvers.oracle(videos)        # "Final Answer: ..."
    check_answer(recs[0], "(a,1): 2, ...")    # the exact checker
    export(videos, "/tmp/vrb"); load("/tmp/vrb")
"""

from jaxlab.data.synthetic.video_reason import grid_demos  # registers
from jaxlab.data.synthetic.video_reason import set_demos  # registers
from jaxlab.data.synthetic.video_reason import solvers
from jaxlab.data.synthetic.video_reason.core import (
    ANSWER_PROMPT, DEMOS, LEVELS, REVEALS, SKILLS, Engine,
    IllegalOperationError, MalformedAnswerError, check_level, check_skill,
    get_engine, simulate, skills_of_level)
from jaxlab.data.synthetic.video_reason.generate import (
    generate, make_video, records, render_video, vid2txt)
from jaxlab.data.synthetic.video_reason.io import export, load
from jaxlab.data.synthetic.video_reason.questions import (
    Video, answer_of, check_answer, format_answer, full_prompt, parse_answer)
