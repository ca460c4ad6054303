"""LoRA for the trainer (Hu et al. 2021): `add_lora`, `merge_lora`, `LoRA`.

The adapters themselves are `jaxlab.nn.lora` (one implementation, below the
checkpoint I/O so that `jaxlab.io.hf.save` folds them with the same
`merge_lora` the trainer's loss uses); these are its names.
"""

from jaxlab.nn.lora import LoRA
from jaxlab.nn.lora import add_lora
from jaxlab.nn.lora import has_lora
from jaxlab.nn.lora import merge_lora

__all__ = ["LoRA", "add_lora", "has_lora", "merge_lora"]
