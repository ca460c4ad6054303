"""The reranker's tokenizer (paper A): a byte tokenizer with its specials.

`<image>` placeholders and the label words of the multi-token direction
probe (spec 8) are named specials, so each is one token id
(`jaxlab.models.reranker.RerankerConfig.from_tokenizer` resolves them). The
strings are the model's (`jaxlab.models.reranker` holds the same constants:
the model layer does not import data; a test checks they agree).
"""

from collections.abc import Sequence

from jaxlab.data import tokenizers

IMAGE_TOKEN = "<image>"
LABEL_TOKENS_POS = ("<yes>", "<true>", "<right>", "<correct>", "<relevant>",
                    "<same>", "<good>", "<positive>")
LABEL_TOKENS_NEG = ("<no>", "<false>", "<wrong>", "<incorrect>",
                    "<irrelevant>", "<different>", "<bad>", "<negative>")


def make_tokenizer(words: Sequence[str] = (),
                   label_tokens: Sequence[str] = LABEL_TOKENS_POS +
                   LABEL_TOKENS_NEG) -> tokenizers.ByteTokenizer:
  """Byte tokenizer with `<image>`, the label tokens and optional whole words.

  `words` (e.g. the synthetic captions' vocabulary) become single tokens,
  which keeps CPU prompts short.
  """
  return tokenizers.ByteTokenizer(
      special_tokens=(IMAGE_TOKEN, *label_tokens, *words))
