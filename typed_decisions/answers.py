"""From a question's readout to its typed answer: the one place an answer is reduced.

    p      = the readout's option probabilities, listed order           (readout.py)
    p      = head(h, log p)            a fitted head for the question   (fitted.py; fitted on raw p:
                                                                          nothing is applied on top)
           | fixed.apply(p)            else a calibration fixed for it  (a preset's entry for the model)
           | calibrate(p, T, p_cf)     else the Decider's file's entry for the question type
    answer = reduce(p)                 noul / choice / score             (reducers.py)

A head and a fixed calibration arrive the same way, per question (``Decider.run_many(heads=...)``),
so a preset's calibration is applied where its head would be, before the one reduction.
"""

from __future__ import annotations

from typing import Union

import numpy as np

from . import reducers
from .calibration import CalibrationFile, FixedCalibration, calibrate
from .fitted import FittedHead
from .readout_plan import Readout, fitted_probabilities
from .reducers import ConfidenceKind
from .schema import Answer

__all__ = ["QuestionHead", "answer_question"]

QuestionHead = Union[FittedHead, FixedCalibration]  # what answers a question in place of the file


def answer_question(r: Readout, *, confidence: ConfidenceKind, calibration: CalibrationFile | None = None,
                    content_free: np.ndarray | None = None, head: QuestionHead | None = None,
                    with_mass: bool = True) -> Answer:
    """The answer to ``r``'s question (module docstring). ``content_free``: p_cf for the file's
    contextual calibration; ``with_mass``: copy the readout's label mass (None unless read)."""
    q = r.question
    p = r.probabilities()
    applied = None
    if isinstance(head, FittedHead):
        p = fitted_probabilities(head, r)
        applied = f"fitted head {head.id} ({head.model}, {head.fitted.rows if head.fitted else '?'} rows)"
    elif isinstance(head, FixedCalibration):
        p = head.apply(p)
        applied = head.note
    elif calibration is not None:
        tc = calibration.for_type(q.type)
        if tc.temperature != 1.0 or tc.contextual:
            p = calibrate(p, tc.temperature, content_free if tc.contextual else None)
            applied = (f"{calibration.model}@v{calibration.version}: T={tc.temperature:g}"
                       + (", contextual" if tc.contextual else ""))
    if q.type == "noul":
        answer: Answer = reducers.reduce_noul(p)
    elif q.type == "choice":
        answer = reducers.reduce_choice(p, list(q.options), confidence)
    else:
        answer = reducers.reduce_score(p, [q.legend[k] for k in q.options], confidence)
    answer.calibration = applied
    if with_mass:
        answer.label_mass = r.mean_label_mass()  # None unless the request asked for it
    return answer
