"""LM examples cut from one continuous token stream (no padding, no resets).

`StreamSource` and `byte_stream_sources` (moved here from
`jaxlab/experiments/frequency_entropy.py`, which still exports
`StreamSource`) serve a signal-probing experiment whose model must see
positions 0..L-1 of real tokens in every row.
"""

import numpy as np

from jaxlab.data import sources as data_sources
from jaxlab.data import tokenizers


class StreamSource:
  """LM examples cut from one continuous token stream (no padding, no resets).

  The FE signal runs over positions 0..L-1 of one sequence (spec C.1), so
  the model is trained the same way: documents (each starting with BOS) are
  concatenated into one stream and cut into windows of `seq_len + 1`, so
  every row has positions 0..L-1 and every target is a real token. (The
  library packer instead resets positions per document and pads rows; a
  whole-row forward pass then extrapolates past the longest document and
  scores padding, which inflated the probe's perplexity to 212 against an
  eval loss of 0.29 nats in a first run.)
  """

  def __init__(self, token_lists, seq_len: int):
    stream = np.concatenate([np.asarray(t, np.int32) for t in token_lists])
    n = (len(stream) - 1) // seq_len
    if n < 1:
      raise ValueError(f"corpus of {len(stream)} tokens is shorter than one "
                       f"sequence of train.seq_len={seq_len}")
    self.stream, self.seq_len, self.n = stream, seq_len, n

  def __len__(self) -> int:
    return self.n

  def rows(self, n: int) -> np.ndarray:
    """The inputs of the first `n` windows (fewer if there are fewer),
    `[n, seq_len]`."""
    return np.stack([self[i]["inputs"] for i in range(min(n, self.n))])

  def __getitem__(self, i: int) -> dict[str, np.ndarray]:
    w = self.stream[i * self.seq_len:(i + 1) * self.seq_len + 1]
    return {"inputs": w[:-1], "targets": w[1:],
            "loss_mask": np.ones(self.seq_len, np.float32)}


def byte_stream_sources(d, seq_len: int) -> tuple[StreamSource, StreamSource]:
  """(train, eval) byte-level `StreamSource`s of data config `d`.

  `d.source` is "synthetic" (`synthetic_corpus(d.num_docs, seed=
  d.data_seed)`) or "jsonl" (`d.path`, `d.text_key`); the last
  `d.eval_fraction` of the documents (at least one) are held out. Each
  document is byte-encoded with BOS and EOS before the stream is cut.
  """
  tok = tokenizers.ByteTokenizer()
  if d.source == "synthetic":
    texts = data_sources.synthetic_corpus(int(d.num_docs),
                                          seed=int(d.data_seed))
  elif d.source == "jsonl":
    texts = data_sources.read_jsonl(d.path, text_key=d.text_key)
  else:
    raise ValueError(f"data.source={d.source!r}; valid for this experiment: "
                     "synthetic, jsonl")
  n_eval = max(1, int(len(texts) * float(d.eval_fraction)))
  toks = [tok.encode(t, add_bos=True, add_eos=True) for t in texts]
  return (StreamSource(toks[:-n_eval], seq_len),
          StreamSource(toks[-n_eval:], seq_len))
