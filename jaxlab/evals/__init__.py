"""jaxlab.evals: metrics and evaluation harnesses.

ranking, text, long_context (passkey, needle, RULER-like suite), calibration,
uncertainty, unlearning (drift, multiple-choice attack), video_reason
(VideoReasonBench scoring), vudg (multiple-choice harness and protocols).
"""
